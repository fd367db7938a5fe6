package ledgerfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"
)

// MaxLine is the longest line the reader accepts; a longer one is a bad line.
const MaxLine = 1 << 20

// bom is a UTF-8 byte order mark: dropped at the start of a file, refused
// anywhere else in a key (it would hide the key: "\uFEFFts" is not ts).
const bom = "\uFEFF"

// ErrTorn marks a line a crashed writer left without its newline.
var ErrTorn = errors.New("torn write (no newline at end of line)")

// LineError is a bad line: the file, its 1-based number, and what was wrong.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("%s: line %d: %v", e.File, e.Line, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// Reader reads rows strictly: every malformed line is a *LineError naming
// its number. Blank and '#' lines are skipped (`# event` lines go to
// OnEvent), unknown keys kept; what a line is, classifyLine decides, as
// it does for ReadJobTail. A torn
// line (the file's last line without a newline, or the line directly above
// a writer's TornMarker) is not an error: it is skipped and listed in Torn.
//
// A second row for one (job, attempt) is a bad line. The check is exact
// (on the job string, not a hash) and keeps one entry per open job (a job
// is forgotten at its job_end): a bit per attempt number, so its memory
// grows with open jobs and their attempts, never with the rows of the log.
//
// With Workers, lines are parsed on several goroutines ahead of Next;
// everything that depends on the lines before (torn markers, duplicate
// attempts, skipped lines) is still settled by Next, in line order, so
// the rows, errors and lists are the same as a plain read's.
type Reader struct {
	name    string
	lr      *LineReader
	skipBad bool
	tsOnly  bool                   // rows are read for their ts alone (NewestTS)
	jobs    map[string]*attemptSet // open jobs; see checkOrder
	parser  *parser                // a plain read's

	pending    Row
	pendingErr error
	hasPending bool

	onEvent   func(*Event)
	onComment func(line int, text string)
	held      func() // a comment or event read after a row Next returned first

	torn    []*LineError
	skipped []*LineError

	workers int
	lines   int       // the most lines a parallel read's batch holds (tests make it small)
	ev      lineRead  // the line a plain read read last
	par     *pipeline // the goroutines of a parallel read, once started
	closed  bool      // Close stopped a parallel read
}

// lineKind is what a line is to the reader.
type lineKind uint8

const (
	lineEOF    lineKind = iota // the end of the input
	lineText                   // a line not yet looked at (a parallel read's, before its worker)
	lineRow                    // a row: row, or err when it did not parse
	lineSkip                   // blank, a comment, or an empty unterminated tail
	lineEvent                  // a "# event" comment: text
	lineMarker                 // a writer's TornMarker
	lineTorn                   // the unterminated tail a crashed writer left
	lineBad                    // a line past MaxLine: err
	lineFatal                  // the input failed: err
)

// lineRead is one line as Next takes it, parsed already when it is a row.
type lineRead struct {
	no   int
	kind lineKind
	err  error
	row  Row
	text []byte // a comment's or event's line, valid until the next line is read
	torn bool   // a parallel read's lineText ended without a newline
	end  int    // where a parallel read's line ends in its batch
}

// attemptSet is the attempt numbers read for one open job, one bit each,
// and the line of the job's first row.
type attemptSet struct {
	first int32
	bits  []uint64
}

// add marks attempt a (1 … admit.MaxAttempts) and reports whether it was new.
func (s *attemptSet) add(a int) bool {
	i, bit := (a-1)/64, uint64(1)<<((a-1)%64)
	if i >= len(s.bits) {
		s.bits = append(s.bits, make([]uint64, i+1-len(s.bits))...)
	}
	if s.bits[i]&bit != 0 {
		return false
	}
	s.bits[i] |= bit
	return true
}

// NewReader reads rows from r; name is the file name used in errors.
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{name: name, lr: NewLineReader(r, name, MaxLine), jobs: map[string]*attemptSet{}, parser: newParser(), lines: batchBytes / 64}
}

// SkipBad makes malformed lines warnings (see Skipped) instead of errors.
func (r *Reader) SkipBad(on bool) { r.skipBad = on }

// Workers makes the reader parse lines on n goroutines (and read them on
// one more), up to a few megabytes of lines ahead of Next; n <= 1 reads
// on the caller's goroutine alone. Call it before the first Next, and
// Close the reader when stopping before io.EOF (after a bad line, Next
// may be called again, as on a plain read). The input is then read on
// another goroutine, which may still be inside a Read of it when Close
// returns: an *os.File or an io.Pipe may be closed then. After Close,
// Next returns io.EOF.
func (r *Reader) Workers(n int) { r.workers = n }

// Close stops a parallel read's goroutines. It is a no-op otherwise, and
// after Next returned io.EOF or an error.
func (r *Reader) Close() {
	if r.par != nil {
		r.par.stop()
		r.closed = true
	}
}

// OnEvent makes the reader hand fn every `# event` line (see Event), in
// file order among the rows Next returns: fn sees an event after the rows
// above it and before the rows below it. The event is reused once fn
// returns. A `# event` line that does not parse as a whole event is a
// plain comment. Without OnEvent, events are skipped like any comment.
func (r *Reader) OnEvent(fn func(*Event)) { r.onEvent = fn }

// OnComment makes the reader hand fn every other comment line, in file
// order among the rows as OnEvent's: a line starting with '#' that is
// not a torn marker, nor an event OnEvent takes, with its number and
// the line without the blanks around it.
func (r *Reader) OnComment(fn func(line int, text string)) { r.onComment = fn }

// note is what the reader hands on for a comment or event line: a call
// of OnEvent's or OnComment's fn, or nil when neither takes it.
func (r *Reader) note(ev *lineRead) func() {
	if ev.kind == lineEvent && r.onEvent != nil {
		if e, err := ParseEvent(ev.text); err == nil {
			e.Line = ev.no
			return func() { r.onEvent(&e) }
		}
	}
	if r.onComment != nil && len(ev.text) > 0 && ev.text[0] == '#' {
		no, text := ev.no, string(ev.text)
		return func() { r.onComment(no, text) }
	}
	return nil
}

// Torn lists the torn lines skipped so far.
func (r *Reader) Torn() []*LineError { return r.torn }

// Skipped lists the malformed lines skipped under SkipBad.
func (r *Reader) Skipped() []*LineError { return r.skipped }

// Next reads the next row into row. It returns io.EOF at the end.
//
// A row is held back until the line after it is read: only then is it
// known not to be the torn line a TornMarker names.
func (r *Reader) Next(row *Row) error {
	if r.closed {
		return io.EOF
	}
	for {
		if r.held != nil {
			held := r.held
			r.held = nil
			held()
		}
		ev := r.next()
		switch ev.kind {
		case lineEOF:
			r.par.stopIfAny()
			if !r.hasPending {
				return io.EOF
			}
			r.hasPending = false
			if err := r.finish(&r.pending, r.pendingErr); err != nil {
				if e := r.bad(err); e != nil {
					return e
				}
				return io.EOF
			}
			*row = r.pending
			return nil
		case lineFatal:
			r.par.stopIfAny()
			return ev.err
		case lineBad:
			if e := r.bad(ev.err); e != nil {
				return e
			}
			continue
		case lineMarker:
			// The marker names the line directly above it, and only that one.
			if r.hasPending && r.pending.Line == ev.no-1 {
				r.hasPending = false
				r.torn = append(r.torn, &LineError{File: r.name, Line: r.pending.Line, Err: ErrTorn})
			}
			continue
		case lineTorn:
			// The file's last bytes with no newline: a crashed writer.
			r.torn = append(r.torn, &LineError{File: r.name, Line: ev.no, Err: ErrTorn})
			continue
		case lineSkip, lineEvent:
			note := r.note(ev)
			if note == nil {
				continue
			}
			if !r.hasPending {
				note()
				continue
			}
			// The row above is settled (a marker names only the line
			// directly above it): it comes first, the event on the next call.
			r.held = note
			r.hasPending = false
			if err := r.finish(&r.pending, r.pendingErr); err != nil {
				if e := r.bad(err); e != nil {
					return e
				}
				continue
			}
			*row = r.pending
			return nil
		}
		// Emit the previous row now that we know it was not marked torn.
		emit := r.hasPending
		var outErr error
		if emit {
			*row, outErr = r.pending, r.pendingErr
		}
		r.pending, r.pendingErr = ev.row, ev.err
		// Kept even when the line did not parse: a torn marker after it
		// names the torn line by this number.
		r.pending.Line = ev.no
		r.hasPending = true
		if emit {
			if err := r.finish(row, outErr); err != nil {
				if e := r.bad(err); e != nil {
					return e
				}
				continue
			}
			return nil
		}
	}
}

// next is the next line, read and parsed here, or by a parallel read's
// goroutines.
func (r *Reader) next() *lineRead {
	if r.par == nil && r.workers > 1 {
		r.par = r.startPipeline(r.workers)
	}
	if r.par != nil {
		return r.par.next()
	}
	ev := &r.ev
	line, no, torn, kind, err := r.readRaw()
	ev.no, ev.kind, ev.err = no, kind, err
	if kind == lineText {
		r.classify(ev, line, torn, r.parser)
	}
	return ev
}

// classify settles what a line is (classifyLine), and parses it when it
// is a row.
func (r *Reader) classify(ev *lineRead, line []byte, torn bool, ps *parser) {
	kind, text := classifyLine(line, !torn)
	ev.kind, ev.err, ev.text = kind, nil, nil
	switch kind {
	case lineRow:
		if r.tsOnly {
			if !ps.ts(text, &ev.row) {
				ev.row.TS = time.Time{} // none, or one that does not read
			}
			return
		}
		if perr := ps.parse(text, &ev.row); perr != nil {
			ev.err = &LineError{File: r.name, Line: ev.no, Err: perr}
		}
	case lineSkip, lineEvent:
		ev.text = text
	}
}

// classifyLine is the one rule for what a line of a log is, whichever
// way the log is read (Reader forward, ReadJobTail from the end). line
// has no newline (and no byte order mark: see trimBOM); terminated says
// a newline ended it. text is the line without the blanks around it.
//
//   - the writer's TornMarker is a marker, even as the input's
//     unterminated tail (a crash after its bytes, before its newline):
//     it names the line directly above it, when that is a row, as torn;
//   - any other unterminated tail is torn when it holds more than blanks;
//   - a blank line, or one starting with '#', is a comment; a comment
//     starting "# event " is an event (see Event);
//   - anything else is a row, hand-written form included, and is parsed
//     strictly.
//
// A line over MaxLine is never looked at: see overLong.
func classifyLine(line []byte, terminated bool) (kind lineKind, text []byte) {
	text = trimLine(line)
	switch {
	case string(text) == TornMarker:
		return lineMarker, text
	case !terminated && len(text) > 0:
		return lineTorn, text
	case len(text) == 0 || !terminated:
		return lineSkip, text
	case bytes.HasPrefix(text, []byte(eventPrefix)):
		return lineEvent, text
	case text[0] == '#':
		return lineSkip, text
	}
	return lineRow, text
}

// NewestTS is the latest ts of the rows in r: what a relative --since
// counts back from, so that a report never reads the clock. The lines are
// the strict read's (a Reader: no torn line, nor the one a torn marker
// names, and a line past MaxLine is no row) and so is the reading of a ts
// (the ts field), but the rest of a row is not read: the strict read that
// comes after refuses a bad row. ok is false when no row carries a ts;
// name is the file named in errors.
func NewestTS(r io.Reader, name string) (newest time.Time, ok bool, err error) {
	rd := NewReader(r, name)
	rd.skipBad, rd.tsOnly = true, true
	var row Row
	for {
		switch err := rd.Next(&row); {
		case err == io.EOF:
			return newest, ok, nil
		case err != nil:
			return newest, ok, errors.Unwrap(err) // the LineReader's error: the caller names the log
		case !row.TS.IsZero() && (!ok || row.TS.After(newest)):
			newest, ok = row.TS, true
		}
	}
}

// ts reads a row's ts pair alone into row.TS, by the ts field's rule;
// false when it has none that reads.
func (p *parser) ts(line []byte, row *Row) bool {
	dec, err := p.record(line)
	for err == nil && dec.ScanKeyval() {
		if string(dec.Key()) == "ts" {
			return fields[fieldIndex["ts"]].set(row, unsafeString(dec.Value()), p) == nil
		}
	}
	if err == nil && dec.Err() != nil {
		p.dec = nil // a Decoder stops at its first error
	}
	return false
}

// overLong is what a line over MaxLine is: torn when it is the input's
// unterminated tail (a crashed writer's), else a bad line.
func overLong(terminated bool) lineKind {
	if terminated {
		return lineBad
	}
	return lineTorn
}

// errOverLong is the error of a bad over-long line.
var errOverLong = fmt.Errorf("%w (over %d bytes)", ErrLineTooLong, MaxLine)

// trimBOM drops a UTF-8 byte order mark from the start of a file's
// first line: every reader of a log calls it on that line alone.
func trimBOM(first []byte) []byte { return bytes.TrimPrefix(first, []byte(bom)) }

// finish checks a row known not to be torn against the rows before it.
func (r *Reader) finish(row *Row, parseErr error) error {
	if parseErr != nil {
		return parseErr
	}
	if err := r.checkOrder(row); err != nil {
		return &LineError{File: r.name, Line: row.Line, Err: err}
	}
	return nil
}

func (r *Reader) bad(err error) error {
	var le *LineError
	if r.skipBad && errors.As(err, &le) {
		r.skipped = append(r.skipped, le)
		return nil
	}
	return err
}

// checkOrder refuses a second row for one (job, attempt). Comparison is
// on the exact job string; a job is forgotten at its job_end, so the map
// holds open jobs only.
func (r *Reader) checkOrder(row *Row) error {
	if row.Job == "" || row.Attempt == 0 {
		return nil
	}
	set := r.jobs[row.Job]
	if set == nil {
		if row.JobEnd != "" {
			return nil // the job's first row is its last: nothing to compare or keep
		}
		set = &attemptSet{first: int32(min(row.Line, math.MaxInt32))}
		r.jobs[row.Job] = set
	}
	if !set.add(row.Attempt) {
		return fmt.Errorf("duplicate attempt: job %q attempt %d appears twice (the job's rows start on line %d)", truncate(row.Job), row.Attempt, set.first)
	}
	if row.JobEnd != "" {
		delete(r.jobs, row.Job)
	}
	return nil
}

// readRaw reads the next line without its newline; torn is true for a
// final line that has none. A line past MaxLine is a bad line (a torn one
// when it is the file's unterminated tail). kind is lineText for a line,
// else what overLong says of an over-long one, lineFatal or lineEOF.
func (r *Reader) readRaw() (line []byte, no int, torn bool, kind lineKind, err error) {
	line, no, torn, err = r.lr.Next()
	if err == io.EOF {
		return nil, no, false, lineEOF, nil
	}
	if err == nil {
		return line, no, torn, lineText, nil
	}
	var le *LineError
	if !errors.As(err, &le) {
		return nil, no, false, lineFatal, fmt.Errorf("failed to read log %q: %w", r.name, err)
	}
	if !torn {
		var serr error
		if torn, serr = r.lr.SkipRest(); serr != nil {
			return nil, no, false, lineFatal, fmt.Errorf("failed to read log %q: %w", r.name, serr)
		}
	}
	if kind = overLong(!torn); kind == lineBad {
		return nil, no, false, kind, err
	}
	return nil, no, true, kind, nil
}

// A parallel read: one goroutine reads the lines (readRaw, by the plain
// read's rules) into batches; workers parse the batches' rows, each with
// a parser of its own; Next takes the batches back in order. A fixed
// number of batches circulate, so memory stays bounded whatever the
// log's size.
type pipeline struct {
	order chan *batch // batches in line order, as the reader sends them out
	work  chan *batch // batches for the workers
	free  chan *batch // batches Next is done with
	quit  chan struct{}
	once  sync.Once

	cur  *batch
	i    int
	last lineRead // the end (or the failure) once it has been read
}

// batch is a run of lines, and what they are.
type batch struct {
	buf   []byte     // the lines' bytes, one after another (each ev's ends at its end)
	ev    []lineRead // one per line; the input's last batch ends with the end or the failure
	ready chan struct{}
}

// batchBytes is about how many bytes of lines a batch holds.
const batchBytes = 256 << 10

// batchesPerWorker is how many batches each worker may have in flight.
const batchesPerWorker = 3

func (r *Reader) startPipeline(workers int) *pipeline {
	n := workers * batchesPerWorker
	p := &pipeline{
		order: make(chan *batch, n), work: make(chan *batch, n), free: make(chan *batch, n),
		quit: make(chan struct{}),
	}
	go r.split(p, n)
	for range workers {
		go r.parseBatches(p)
	}
	return p
}

func (p *pipeline) stop() { p.once.Do(func() { close(p.quit) }) }

// stopIfAny stops a parallel read's goroutines at its end; a plain read
// has none.
func (p *pipeline) stopIfAny() {
	if p != nil {
		p.stop()
	}
}

// split reads the input's lines into batches and sends them out, in order.
func (r *Reader) split(p *pipeline, batches int) {
	defer close(p.work)
	defer close(p.order)
	made := 0
	for {
		var b *batch
		if made < batches {
			b = &batch{ready: make(chan struct{}, 1), buf: make([]byte, 0, batchBytes+4<<10)}
			made++
		} else {
			select {
			case b = <-p.free:
			case <-p.quit:
				return
			}
		}
		b.buf, b.ev = b.buf[:0], b.ev[:0]
		end := false
		for len(b.buf) < batchBytes && len(b.ev) < r.lines && !end {
			line, no, torn, kind, err := r.readRaw()
			b.buf = append(b.buf, line...)
			b.ev = append(b.ev, lineRead{no: no, kind: kind, err: err, torn: torn, end: len(b.buf)})
			end = kind == lineEOF || kind == lineFatal
		}
		p.order <- b
		p.work <- b
		if end {
			return
		}
	}
}

// parseBatches parses the rows of each batch it takes.
func (r *Reader) parseBatches(p *pipeline) {
	ps := newParser()
	for b := range p.work {
		select {
		case <-p.quit:
			// Stopped: what is left is not read; say it is ready unparsed.
			b.ready <- struct{}{}
			continue
		default:
		}
		start := 0
		for i := range b.ev {
			ev := &b.ev[i]
			if ev.kind == lineText {
				r.classify(ev, b.buf[start:ev.end], ev.torn, ps)
			}
			start = ev.end
		}
		b.ready <- struct{}{}
	}
}

// next is the next line in order; after the end, the end again, and
// after stop, the end.
func (p *pipeline) next() *lineRead {
	select {
	case <-p.quit:
		return &p.last
	default:
	}
	for p.cur == nil || p.i == len(p.cur.ev) {
		if p.cur != nil {
			p.free <- p.cur
			p.cur = nil
		}
		b, ok := <-p.order
		if !ok {
			return &p.last
		}
		<-b.ready
		p.cur, p.i = b, 0
	}
	ev := &p.cur.ev[p.i]
	p.i++
	if ev.kind == lineEOF || ev.kind == lineFatal {
		p.last = lineRead{no: ev.no, kind: ev.kind, err: ev.err}
	}
	return ev
}

// ReadAll reads every row of r, strictly.
func ReadAll(rd io.Reader, name string) ([]Row, *Reader, error) {
	r := NewReader(rd, name)
	var rows []Row
	for {
		var row Row
		err := r.Next(&row)
		if err == io.EOF {
			return rows, r, nil
		}
		if err != nil {
			return rows, r, err
		}
		rows = append(rows, row)
	}
}

// OpenLog opens a log for reading. It refuses a symbolic link (a log is
// appended to, and a link would send rows into an unrelated file) and
// anything but a regular file (a FIFO would hang the read, a device never
// ends). A missing log is an error wrapping fs.ErrNotExist.
func OpenLog(path string) (*os.File, error) {
	return openRegular(path, "log", os.O_RDONLY|noFollow|nonBlock, 0)
}

// ReadFile reads every row of the log at path. A missing file has no rows.
func ReadFile(path string) ([]Row, *Reader, error) {
	f, err := OpenLog(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, NewReader(bytes.NewReader(nil), path), nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	return ReadAll(f, path)
}

// trimLine drops ASCII blanks around a line (a CR before the newline
// among them). Unicode spaces are text: an unquoted value may end in one.
func trimLine(b []byte) []byte {
	if len(b) > 0 && !isBlank(b[0]) && !isBlank(b[len(b)-1]) {
		return b // a row as the writer writes it: nothing to trim
	}
	return bytes.Trim(b, " \t\r\v\f")
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }
