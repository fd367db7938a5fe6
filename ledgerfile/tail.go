package ledgerfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"
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
// The rules are the forward Reader's, decided by the same classifyLine:
// a torn tail and the line a TornMarker names are skipped (an
// unterminated marker still names it), every line holding the job id is
// read strictly, a line over MaxLine holding it is an error, a job's
// attempts must increase. Rows read this way carry
// Line 0 (their number is not known without reading the whole file);
// errors do name the line, counted then.
func ReadJobTail(r io.ReaderAt, size int64, name, job string, enough func(*Row) bool) ([]Row, error) {
	match := func(row *Row) bool { return row.Job == job }
	return readTail(r, size, name, needleOf(job), match, enough)
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

// needleOf is the longest run of v that every line holding v spells
// literally: the writer's quoting escapes '"', '\\', control characters,
// DEL and bad UTF-8, and a hand-written line may leave them raw, so the
// run avoids them. A line that spells the id with escapes it does not
// need (\u0061 for a) is not found. Empty when v has no such run: then
// every line is read.
func needleOf(v string) []byte {
	best, cur := "", 0
	for i := 0; i <= len(v); {
		c, n := utf8.RuneError, 1
		if i < len(v) {
			c, n = utf8.DecodeRuneInString(v[i:])
		}
		if i == len(v) || c < ' ' || c == '"' || c == '\\' || c == 0x7f || c == utf8.RuneError {
			if i-cur > len(best) {
				best = v[cur:i]
			}
			cur = i + n
		}
		i += n
	}
	return []byte(best)
}

func readTail(r io.ReaderAt, size int64, name string, needle []byte, match, enough func(*Row) bool) ([]Row, error) {
	bs := &backScanner{r: r, pos: size}
	ps := newParser()
	// above: the line above a TornMarker is torn when it is a row (the
	// forward Reader's rule, from the other side).
	above, err := bs.dropTornTail()
	if err != nil {
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
	)
	for {
		var (
			line    []byte
			start   int64
			tooLong bool
			named   bool // the line below this one is a TornMarker
			err     error
		)
		if len(needle) > 0 && len(needle) < tailBlock/2 {
			// Jump from one line holding the needle to the next one up;
			// the lines between cannot be the job's.
			line, start, tooLong, named, err = bs.prevHolding(needle)
		} else {
			line, start, tooLong, err = bs.prev()
			named = above
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("failed to read log %q: %w", name, err)
		}
		if start == 0 {
			line = trimBOM(line)
		}
		var kind lineKind
		var t []byte
		if tooLong {
			kind = overLong(true) // the unterminated tail was dropped above
		} else {
			kind, t = classifyLine(line, true)
		}
		above = kind == lineMarker
		switch {
		case kind == lineBad:
			return nil, lineErr(start, errOverLong)
		case kind != lineRow, named, !bytes.Contains(t, needle):
			continue
		}
		var row Row
		if err := ps.parse(t, &row); err != nil {
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
// crashed writer's partial row, which no reader counts, or a TornMarker
// whose newline a crash cut off (marker is then true: it still names the
// line above it).
func (b *backScanner) dropTornTail() (marker bool, err error) {
	if b.pos == 0 {
		return false, nil
	}
	if err := b.load(b.pos); err != nil {
		return false, err
	}
	if b.buf[len(b.buf)-1] == '\n' {
		return false, nil
	}
	b.pos++ // pretend a newline follows, then skip that line
	_, start, _, err := b.prev()
	if err != nil {
		return false, err
	}
	return b.markerAt(start)
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

// prevHolding returns the last line before pos that holds needle (see
// prev), skipping the lines after it, and whether the line right after
// it is a TornMarker (then it is a torn line no reader counts).
func (b *backScanner) prevHolding(needle []byte) (line []byte, start int64, tooLong, torn bool, err error) {
	limit := b.pos // search [0, limit)
	for {
		if limit <= 0 {
			b.pos = 0
			return nil, 0, false, false, io.EOF
		}
		if limit <= b.off || limit > b.off+int64(len(b.buf)) {
			if err := b.load(limit); err != nil {
				return nil, 0, false, false, err
			}
		}
		i := lastIndex(b.buf[:limit-b.off], needle)
		if i < 0 {
			if b.off == 0 {
				b.pos = 0
				return nil, 0, false, false, io.EOF
			}
			limit = b.off + int64(len(needle)) - 1 // a needle across two windows
			if err := b.load(limit); err != nil {
				return nil, 0, false, false, err
			}
			continue
		}
		// The newline ending the needle's line: pos-1 at the latest.
		end, terminated, err := b.lineEnd(b.off + int64(i))
		if err == nil && !terminated {
			err = io.ErrUnexpectedEOF // the file shrank under us
		}
		if err != nil {
			return nil, 0, false, false, err
		}
		b.pos = end + 1
		torn, err = b.markerAt(end + 1)
		if err != nil {
			return nil, 0, false, false, err
		}
		line, start, tooLong, err = b.prev()
		return line, start, tooLong, torn, err
	}
}

// lastIndex is bytes.LastIndex by forward searches: bytes.Index is
// vectorised, and most blocks hold no match at all.
func lastIndex(b, needle []byte) int {
	last := -1
	for at := 0; ; {
		i := bytes.Index(b[at:], needle)
		if i < 0 {
			return last
		}
		last = at + i
		at = last + 1
	}
}

// lineEnd is where the line starting at or before offset at ends: its
// newline, or, when terminated is false, the end of the input.
func (b *backScanner) lineEnd(at int64) (end int64, terminated bool, err error) {
	if at >= b.off && at < b.off+int64(len(b.buf)) {
		if j := bytes.IndexByte(b.buf[at-b.off:], '\n'); j >= 0 {
			return at + int64(j), true, nil
		}
		at = b.off + int64(len(b.buf))
	}
	var chunk [4096]byte
	for {
		n, err := b.r.ReadAt(chunk[:], at)
		if j := bytes.IndexByte(chunk[:n], '\n'); j >= 0 {
			return at + int64(j), true, nil
		}
		at += int64(n)
		if errors.Is(err, io.EOF) {
			return at, false, nil
		}
		if err != nil {
			return 0, false, err
		}
	}
}

// markerAt reports whether the line starting at offset at is a TornMarker:
// the line is read whole, as far as MaxLine (a first line without its
// byte order mark), and classifyLine decides (the input's unterminated
// tail may be one).
func (b *backScanner) markerAt(at int64) (bool, error) {
	end, terminated, err := b.lineEnd(at)
	if err != nil || end-at > MaxLine {
		return false, err // a line over MaxLine is never looked at
	}
	var line []byte
	if at >= b.off && end <= b.off+int64(len(b.buf)) {
		line = b.buf[at-b.off : end-b.off]
	} else {
		line = make([]byte, end-at)
		if n, err := b.r.ReadAt(line, at); n < len(line) {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the file shrank under us
			}
			return false, err
		}
	}
	if at == 0 {
		line = trimBOM(line)
	}
	kind, _ := classifyLine(line, terminated)
	return kind == lineMarker, nil
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
