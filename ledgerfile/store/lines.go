package store

import (
	"bufio"
	"context"
	"errors"
	"io"
	"iter"

	"github.com/retrygate/retrygate/ledgerfile"
)

// ReadEntries reads a log file in order: its rows, strictly, through
// ledgerfile's reader (bad lines, duplicate attempts and torn lines as it
// says), and its comment lines beside them. The header line and torn
// markers are the writer's own and are not entries.
func ReadEntries(r io.Reader, name string, fn func(Entry) error) error {
	rd := ledgerfile.NewReader(r, name)
	var failed error
	rd.OnComment(func(line int, text string) {
		if failed == nil && (line != 1 || text != ledgerfile.Header) {
			failed = fn(Entry{Comment: text})
		}
	})
	var row ledgerfile.Row
	for {
		err := rd.Next(&row)
		if failed != nil {
			return failed
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(Entry{Row: &row}); err != nil {
			return err
		}
	}
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
