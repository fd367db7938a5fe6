package ledgerfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/go-logfmt/logfmt"
)

// tailBlock is how much of the file one backward read takes.
const tailBlock = 64 << 10

// ReadJobTail reads the rows of one job from the end of a log backwards,
// and returns them in file order. It stops at the job's latest row for
// which enough reports true, so the answer may be a suffix of the job's
// rows: with enough = CarriesSpend that suffix starts at a row carrying
// the job's cumulative spend before it (spent_s, spent_tokens, spent_usd,
// used), which together with the rows after it is everything the gate
// needs (JobSpend accepts such a suffix). With enough nil every row of
// the job is returned. A job whose rows are near the end of a long log is
// read in a few blocks, in memory bounded by MaxLine and the rows kept.
//
// The rules are the forward Reader's: a torn tail and the line a
// TornMarker names are skipped, every line holding the job id is read
// strictly, a job's attempts must increase. Rows read this way carry
// Line 0 (their number is not known without reading the whole file);
// errors do name the line, counted then.
func ReadJobTail(r io.ReaderAt, size int64, name, job string, enough func(*Row) bool) ([]Row, error) {
	match := func(row *Row) bool { return row.Job == job }
	return readTail(r, size, name, encodedValue(job), match, enough)
}

// CarriesSpend is ReadJobTail's stop rule for numbering and spend: a row
// that carries the job's spend before it.
func CarriesSpend(r *Row) bool { return r.HasSpent }

// JobTail opens the log at path (see OpenLog: a missing log is an error
// wrapping fs.ErrNotExist) and reads one job's rows with ReadJobTail.
func JobTail(path, job string, enough func(*Row) bool) ([]Row, error) {
	return tailFile(path, func(f *os.File, size int64) ([]Row, error) {
		return ReadJobTail(f, size, path, job, enough)
	})
}

func tailFile(path string, read func(*os.File, int64) ([]Row, error)) ([]Row, error) {
	f, err := OpenLog(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("failed to read log %q: %w", path, unwrapPath(err))
	}
	return read(f, st.Size())
}

// encodedValue is how a value appears in a line the writer wrote, quotes
// aside: what a line holding it must contain.
func encodedValue(v string) []byte {
	var b bytes.Buffer
	_ = logfmt.NewEncoder(&b).EncodeKeyval("k", v)
	out := bytes.TrimPrefix(b.Bytes(), []byte("k="))
	if len(out) >= 2 && out[0] == '"' {
		out = out[1 : len(out)-1]
	}
	return out
}

func readTail(r io.ReaderAt, size int64, name string, needle []byte, match, enough func(*Row) bool) ([]Row, error) {
	bs := &backScanner{r: r, pos: size}
	if err := bs.dropTornTail(); err != nil {
		return nil, fmt.Errorf("failed to read log %q: %w", name, err)
	}
	lineErr := func(at int64, err error) error {
		n, cerr := lineAt(r, at)
		if cerr != nil {
			return fmt.Errorf("failed to read log %q: %w", name, cerr)
		}
		return &LineError{File: name, Line: n, Err: err}
	}
	var (
		rows   []Row // newest first
		starts []int64
		seen   = map[attemptKey]int64{} // the kept rows' attempts, and where
		above  bool                     // the line above a TornMarker is torn: skip it
	)
	for {
		line, start, tooLong, err := bs.prev()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("failed to read log %q: %w", name, err)
		}
		if above {
			above = false
			continue
		}
		if tooLong {
			return nil, lineErr(start, fmt.Errorf("%w (over %d bytes)", ErrLineTooLong, MaxLine))
		}
		if start == 0 {
			line = bytes.TrimPrefix(line, []byte(bom))
		}
		t := trimLine(line)
		if string(t) == TornMarker {
			above = true
			continue
		}
		if len(t) == 0 || t[0] == '#' || !bytes.Contains(t, needle) {
			continue
		}
		var row Row
		if err := parseLine(t, &row, nil); err != nil {
			return nil, lineErr(start, err)
		}
		if !match(&row) {
			continue
		}
		if row.Job != "" && row.Attempt > 0 {
			// The forward reader refuses a second (job, attempt): say so alike.
			k := attemptKey{row.Job, row.Attempt}
			if row.JobEnd != "" {
				clear(seen) // the forward reader forgets the job here
			} else if newer, dup := seen[k]; dup {
				n, _ := lineAt(r, newer)
				first, _ := lineAt(r, start)
				return nil, &LineError{File: name, Line: n, Err: fmt.Errorf("duplicate attempt: job %q attempt %d already on line %d", truncate(row.Job), row.Attempt, first)}
			}
			seen[k] = start
		}
		rows, starts = append(rows, row), append(starts, start)
		if enough != nil && enough(&row) {
			break
		}
	}
	for i, j := 0, len(rows)-1; i < j; i, j = i+1, j-1 {
		rows[i], rows[j] = rows[j], rows[i]
	}
	return rows, nil
}

type attemptKey struct {
	job     string
	attempt int
}

// lineAt is the 1-based number of the line starting at offset at.
func lineAt(r io.ReaderAt, at int64) (int, error) {
	buf := make([]byte, tailBlock)
	n := 1
	for off := int64(0); off < at; {
		k, err := r.ReadAt(buf[:min(int64(len(buf)), at-off)], off)
		n += bytes.Count(buf[:k], []byte{'\n'})
		off += int64(k)
		if err != nil && k == 0 {
			return n, err
		}
	}
	return n, nil
}

// backScanner hands out a file's lines from the last to the first.
type backScanner struct {
	r    io.ReaderAt
	pos  int64  // the next line returned ends just before pos ('\n' at pos-1)
	buf  []byte // a window of the file: bytes [off, off+len(buf))
	off  int64
	long []byte
}

// dropTornTail moves pos before a final line that has no newline: a
// crashed writer's partial row, which no reader counts.
func (b *backScanner) dropTornTail() error {
	if b.pos == 0 {
		return nil
	}
	if err := b.load(b.pos); err != nil {
		return err
	}
	if b.buf[len(b.buf)-1] == '\n' {
		return nil
	}
	b.pos++ // pretend a newline follows, then skip that line
	_, _, _, err := b.prev()
	return err
}

// load fills the window with the block ending at end.
func (b *backScanner) load(end int64) error {
	b.off = max(0, end-tailBlock)
	if cap(b.buf) < tailBlock {
		b.buf = make([]byte, tailBlock)
	}
	b.buf = b.buf[:end-b.off]
	n, err := b.r.ReadAt(b.buf, b.off)
	if n < len(b.buf) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the file shrank under us
		}
		return err
	}
	return nil
}

// prev returns the line before pos, without its newline, and where it
// starts. A line over MaxLine comes back empty with tooLong set. The
// line is valid until the next call.
func (b *backScanner) prev() (line []byte, start int64, tooLong bool, err error) {
	if b.pos <= 0 {
		return nil, 0, false, io.EOF
	}
	end := b.pos - 1 // the newline
	e := end
	pieces := 0
	for {
		if e == 0 {
			start = 0
			break
		}
		if e <= b.off || e > b.off+int64(len(b.buf)) {
			if err := b.load(e); err != nil {
				return nil, 0, false, err
			}
		}
		chunk := b.buf[:e-b.off]
		pieces++
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			start = b.off + int64(i) + 1
			break
		}
		e = b.off
	}
	b.pos = start
	switch {
	case end == start:
		return nil, start, false, nil
	case end-start > MaxLine:
		return nil, start, true, nil
	case pieces <= 1 && start >= b.off:
		return b.buf[start-b.off : end-b.off], start, false, nil
	}
	// The line spans windows: read it whole (it is at most MaxLine).
	b.long = append(b.long[:0], make([]byte, end-start)...)
	if n, err := b.r.ReadAt(b.long, start); n < len(b.long) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, 0, false, err
	}
	return b.long, start, false, nil
}
