package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"iter"

	"retrygate/ledgerfile"
)

// ReadEntries reads a log file in order: its rows, strictly, through
// ledgerfile's reader (bad lines, duplicate attempts and torn lines as it
// says), and its comment lines beside them. The header line and torn
// markers are the writer's own and are not entries.
func ReadEntries(r io.Reader, name string, fn func(Entry) error) error {
	tap := &commentTap{r: r}
	rd := ledgerfile.NewReader(tap, name)
	var row ledgerfile.Row
	flush := func(before int) error {
		for len(tap.comments) > 0 && (before == 0 || tap.comments[0].line < before) {
			c := tap.comments[0]
			tap.comments = tap.comments[1:]
			if err := fn(Entry{Comment: c.text}); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		err := rd.Next(&row)
		if err == io.EOF {
			return flush(0)
		}
		if err != nil {
			return err
		}
		if err := flush(row.Line); err != nil {
			return err
		}
		if err := fn(Entry{Row: &row}); err != nil {
			return err
		}
	}
}

type comment struct {
	line int
	text string
}

// commentTap passes a log's bytes through unchanged and keeps its complete
// comment lines with their numbers, counted as the reader counts them.
type commentTap struct {
	r        io.Reader
	line     int    // complete lines seen
	partial  []byte // the current line so far
	comments []comment
}

func (t *commentTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	b := p[:n]
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(t.partial) <= ledgerfile.MaxLine {
				t.partial = append(t.partial, b...)
			}
			break
		}
		var line []byte
		if len(t.partial) > 0 {
			t.partial = append(t.partial, b[:i]...)
			line = t.partial
		} else {
			line = b[:i]
		}
		t.line++
		t.keep(line)
		t.partial = t.partial[:0]
		b = b[i+1:]
	}
	return n, err
}

func (t *commentTap) keep(line []byte) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 || trimmed[0] != '#' || len(line) > ledgerfile.MaxLine {
		return
	}
	s := string(trimmed)
	if s == ledgerfile.TornMarker || (t.line == 1 && s == ledgerfile.Header) {
		return
	}
	t.comments = append(t.comments, comment{t.line, s})
}

// Export writes every entry of l in the file format, byte for byte what
// the file writer would have written for the same rows and comments: the
// header, then one line per entry, through ledgerfile's one encoder.
func Export(ctx context.Context, l Log, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.WriteString(ledgerfile.Header + "\n"); err != nil {
		return err
	}
	var buf []byte
	err := l.Scan(ctx, func(e Entry) error {
		if e.Row != nil {
			buf = ledgerfile.AppendRow(buf[:0], e.Row)
		} else {
			buf = append(append(buf[:0], e.Comment...), '\n')
		}
		_, err := bw.Write(buf)
		return err
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// Entries is ReadEntries as an iterator, for a consumer that pulls (COPY).
func Entries(r io.Reader, name string) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		stopped := errors.New("stopped")
		err := ReadEntries(r, name, func(e Entry) error {
			if !yield(e, nil) {
				return stopped
			}
			return nil
		})
		if err != nil && err != stopped {
			yield(Entry{}, err)
		}
	}
}
