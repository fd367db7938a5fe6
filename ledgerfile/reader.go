package ledgerfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"retrygate/admit"
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
	jobs    map[string]*attemptSet // open jobs; see checkOrder
	intern  *interner

	pending    Row
	pendingErr error
	hasPending bool

	onEvent func(*Event)
	held    Event // an event read after a row Next returned first
	hasHeld bool

	torn    []*LineError
	skipped []*LineError

	workers int
	src     io.Reader // the input, which a parallel read reads in chunks
	chunk   int       // bytes per read of a parallel read (tests make it small)
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
	text []byte // an event's line, valid until the next line is read
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
	return &Reader{name: name, src: r, lr: NewLineReader(r, name, MaxLine), jobs: map[string]*attemptSet{}, intern: newInterner()}
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
		if r.hasHeld {
			r.hasHeld = false
			r.onEvent(&r.held)
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
		case lineSkip:
			continue
		case lineEvent:
			if r.onEvent == nil {
				continue
			}
			e, perr := ParseEvent(ev.text)
			if perr != nil {
				continue // not a whole event: a comment
			}
			e.Line = ev.no
			if !r.hasPending {
				r.onEvent(&e)
				continue
			}
			// The row above is settled (a marker names only the line
			// directly above it): it comes first, the event on the next call.
			r.held, r.hasHeld = e, true
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
		r.classify(ev, line, torn, r.intern)
	}
	return ev
}

// classify settles what a line is (classifyLine), and parses it when it
// is a row.
func (r *Reader) classify(ev *lineRead, line []byte, torn bool, in *interner) {
	kind, text := classifyLine(line, !torn)
	ev.kind, ev.err, ev.text = kind, nil, nil
	switch kind {
	case lineRow:
		if perr := parseLine(text, &ev.row, in); perr != nil {
			ev.err = &LineError{File: r.name, Line: ev.no, Err: perr}
		}
	case lineEvent:
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

// IsTornMarker reports whether a whole line (no newline) is the writer's
// TornMarker, by the readers' rule (classifyLine): a quick scan that is
// not a strict read (summary.NewestTS) drops the line above one.
func IsTornMarker(line []byte) bool {
	kind, _ := classifyLine(line, true)
	return kind == lineMarker
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
			return nil, no, false, lineFatal, serr
		}
	}
	if kind = overLong(!torn); kind == lineBad {
		return nil, no, false, kind, err
	}
	return nil, no, true, kind, nil
}

// A parallel read: one goroutine reads the input in large chunks, each
// cut after its last newline; workers split the chunks into lines and
// parse them; Next takes the batches back in order and numbers their
// lines. A fixed number of batches circulate, so memory stays bounded
// whatever the log's size. The reading goroutine never looks at a line
// (a line longer than a chunk aside): a plain read's line-by-line work
// moves to the workers, and a line's bytes are read once, into its batch.
type pipeline struct {
	order chan *batch // batches in line order, as the reader sends them out
	work  chan *batch // batches for the workers
	free  chan *batch // batches Next is done with
	quit  chan struct{}
	once  sync.Once

	cur  *batch
	i    int
	base int      // the lines of the batches before cur
	last lineRead // the end (or the failure) once it has been read
}

// batch is whole lines of the input, and what they are. Its events are
// numbered within it, from 1; Next adds the lines of the batches before.
type batch struct {
	buf   []byte // whole lines, each with its newline; the input's unterminated tail last
	first bool   // buf starts the input: a byte order mark there is dropped
	// after is what follows buf's lines, when hasAfter: a line over
	// MaxLine (lineBad, or the torn tail it ends in), the end, or a failure.
	after    lineRead
	hasAfter bool
	ev       []lineRead // one per line of buf, then after
	lines    int        // the lines among ev
	ready    chan struct{}
}

// chunkBytes is how much a parallel read reads into a batch at a time
// (less than MaxLine, so no line in a whole chunk is over-long).
const chunkBytes = 256 << 10

// batchesPerWorker is how many batches each worker may have in flight.
const batchesPerWorker = 3

func (r *Reader) startPipeline(workers int) *pipeline {
	n := workers * batchesPerWorker
	if r.chunk <= 0 || r.chunk > MaxLine {
		r.chunk = chunkBytes // a chunk is never longer than a line may be
	}
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

// chunker reads the input for split: whole lines at a time, with the
// semantics of LineReader (and readRaw) for the rest: a line over
// MaxLine is a bad line, or torn when the input ends inside it; a read
// error ends the read after the whole lines before it.
type chunker struct {
	r     *Reader
	carry []byte // the start of a line the last batch did not finish
	eof   bool
	err   error // the read error that ended the input
	empty int   // reads in a row that returned nothing
}

// read reads at most more bytes onto b.buf, once, growing it when it
// must, and notes the end or a failure.
func (c *chunker) read(b *batch, more int) {
	if cap(b.buf)-len(b.buf) < more {
		grown := make([]byte, len(b.buf), len(b.buf)+max(more, len(b.buf)))
		copy(grown, b.buf)
		b.buf = grown
	}
	n, err := c.r.src.Read(b.buf[len(b.buf) : len(b.buf)+more])
	b.buf = b.buf[:len(b.buf)+n]
	switch {
	case err == io.EOF:
		c.eof = true
	case err != nil:
		c.eof, c.err = true, err
	case n == 0:
		// As bufio does: a reader that keeps returning nothing is broken.
		if c.empty++; c.empty >= 100 {
			c.eof, c.err = true, io.ErrNoProgress
		}
	default:
		c.empty = 0
	}
}

// fill reads the next batch's lines into b; it reports whether the input
// has ended (b then carries the end, or the failure, last).
func (c *chunker) fill(b *batch) bool {
	size := c.r.chunk
	b.buf = append(b.buf[:0], c.carry...)
	c.carry = c.carry[:0]
	for !c.eof && len(b.buf) < size {
		c.read(b, size-len(b.buf))
	}
	cut := bytes.LastIndexByte(b.buf, '\n') + 1
	if cut == 0 && !c.eof {
		// A full chunk without a newline: a line longer than a chunk.
		return c.long(b)
	}
	if c.eof {
		return c.end(b)
	}
	c.carry = append(c.carry, b.buf[cut:]...)
	b.buf = b.buf[:cut]
	return false
}

// long reads a line longer than a chunk, which starts b.buf: up to its
// newline when it is within MaxLine (b then holds it, and the whole lines
// after it that came with it), or else to its end, as a bad line.
func (c *chunker) long(b *batch) bool {
	from := 0 // where the newline is not yet looked for
	for {
		if i := bytes.IndexByte(b.buf[from:], '\n'); i >= 0 {
			i += from
			if i > MaxLine {
				c.carry = append(c.carry, b.buf[i+1:]...)
				b.buf = b.buf[:0]
				c.tooLong(b, false)
				return false
			}
			// Every line after it is shorter than MaxLine: at most
			// MaxLine + one chunk was read, and a chunk came before i.
			cut := bytes.LastIndexByte(b.buf, '\n') + 1
			if c.eof {
				return c.end(b)
			}
			c.carry = append(c.carry, b.buf[cut:]...)
			b.buf = b.buf[:cut]
			return false
		}
		if len(b.buf) > MaxLine {
			// Over-long: skip to its newline in bounded memory.
			for {
				b.buf = b.buf[:0]
				if c.eof {
					if c.err != nil {
						return c.end(b)
					}
					c.tooLong(b, true)
					return c.end(b)
				}
				c.read(b, c.r.chunk)
				if i := bytes.IndexByte(b.buf, '\n'); i >= 0 {
					c.carry = append(c.carry, b.buf[i+1:]...)
					b.buf = b.buf[:0]
					c.tooLong(b, false)
					return false
				}
			}
		}
		if c.eof {
			return c.end(b) // the unterminated tail, within MaxLine
		}
		from = len(b.buf)
		c.read(b, c.r.chunk)
	}
}

// tooLong ends b with a line over MaxLine: a bad line, or the torn tail
// when the input ended inside it (readRaw's rule).
func (c *chunker) tooLong(b *batch, torn bool) {
	b.hasAfter = true
	b.after = lineRead{kind: overLong(!torn)}
	if b.after.kind == lineBad {
		b.after.err = &LineError{File: c.r.name, Err: errOverLong}
	}
}

// end finishes the last batch: its lines are b.buf's (a failed read
// drops the line it cut short), then the end or the failure.
func (c *chunker) end(b *batch) bool {
	if c.err != nil {
		b.buf = b.buf[:bytes.LastIndexByte(b.buf, '\n')+1]
	}
	if b.hasAfter {
		// An over-long torn tail: the end follows it in a batch of its own.
		return false
	}
	b.hasAfter = true
	if c.err != nil {
		b.after = lineRead{kind: lineFatal, err: fmt.Errorf("failed to read log %q: %w", c.r.name, fmt.Errorf("failed to read %q: %w", c.r.name, c.err))}
	} else {
		b.after = lineRead{kind: lineEOF}
	}
	return true
}

// split reads the input into batches and sends them out, in order.
func (r *Reader) split(p *pipeline, batches int) {
	defer close(p.work)
	defer close(p.order)
	c := &chunker{r: r}
	made := 0
	for first := true; ; first = false {
		select {
		case <-p.quit:
			return
		default:
		}
		var b *batch
		if made < batches {
			b = &batch{ready: make(chan struct{}, 1), buf: make([]byte, 0, r.chunk)}
			made++
		} else {
			select {
			case b = <-p.free:
			case <-p.quit:
				return
			}
		}
		b.first, b.hasAfter, b.after = first, false, lineRead{}
		end := c.fill(b)
		p.order <- b
		p.work <- b
		if end {
			return
		}
	}
}

// parseBatches splits and parses the lines of each batch it takes, with
// an interner of its own.
func (r *Reader) parseBatches(p *pipeline) {
	in := newInterner()
	for b := range p.work {
		b.ev, b.lines = b.ev[:0], 0
		select {
		case <-p.quit:
			// Stopped: what is left is not read; say it is ready unparsed.
			b.ready <- struct{}{}
			continue
		default:
		}
		r.parseBatch(b, in)
		b.ready <- struct{}{}
	}
}

func (r *Reader) parseBatch(b *batch, in *interner) {
	buf := b.buf
	no := 0
	for pos := 0; pos < len(buf); {
		var line []byte
		torn := false
		if i := bytes.IndexByte(buf[pos:], '\n'); i >= 0 {
			line, pos = buf[pos:pos+i], pos+i+1
		} else {
			line, pos, torn = buf[pos:], len(buf), true
		}
		no++
		if no == 1 && b.first {
			line = trimBOM(line)
		}
		if n := len(b.ev); n < cap(b.ev) {
			b.ev = b.ev[:n+1]
		} else {
			b.ev = append(b.ev, lineRead{})
		}
		ev := &b.ev[len(b.ev)-1]
		ev.no, ev.err = no, nil
		r.classify(ev, line, torn, in)
	}
	if b.hasAfter {
		ev := b.after
		if ev.kind == lineBad || ev.kind == lineTorn {
			no++
			if le, ok := ev.err.(*LineError); ok {
				e := *le // the batch is read again: a fresh error each time
				e.Line = no
				ev.err = &e
			}
		}
		ev.no = no
		b.ev = append(b.ev, ev)
	}
	b.lines = no
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
			p.base += p.cur.lines
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
	ev.no += p.base
	if le, ok := ev.err.(*LineError); ok {
		le.Line += p.base
	}
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

// ParseLine decodes one logfmt line into row. It accepts seed 003's
// hand-written form, where unquoted words after a value belong to that
// value: `decision=refuse: queue wait`.
func ParseLine(line []byte, row *Row) error {
	return parseLine(line, row, nil)
}

// interner shares the strings that repeat from row to row (seat, model,
// decision), so a million-row log does not allocate a million copies.
// Each field remembers its last string first: rows in a run repeat them,
// and comparing with the last beats a map lookup. A nil interner copies.
type interner struct {
	m    map[string]string
	last [numSlots]string
	// after[k] is the key that followed key k (0: the line's start) on
	// the line before: a writer writes its keys in one order, so the key
	// there is compared in place instead of scanned for and looked up.
	after [numKeys]uint8
	arena []byte // copy's current block
}

// Interned fields, each with its last string.
const (
	slotSeat = iota
	slotModel
	slotTokensFrom
	slotPromptFrom
	slotCompletionFrom
	slotBilling
	slotErrorCode
	slotDecision
	slotJobEnd
	slotJob       // last only: a job's attempts are adjacent
	slotPromptSHA // last only: one prompt's rows run together
	numSlots
)

func newInterner() *interner { return &interner{m: map[string]string{}} }

func (in *interner) str(slot int, b []byte) string {
	if in == nil {
		return string(b)
	}
	if s := in.last[slot]; s == string(b) {
		return s
	}
	s, ok := in.m[string(b)]
	if !ok {
		s = string(b)
		if len(in.m) < 4096 {
			in.m[s] = s
		}
	}
	in.last[slot] = s
	return s
}

// recent is str for a value that rarely repeats beyond the row before
// (a job id): only the last one is kept, and the map is left alone.
func (in *interner) recent(slot int, b []byte) string {
	if in == nil {
		return string(b)
	}
	if s := in.last[slot]; s == string(b) {
		return s
	}
	s := in.copy(b)
	in.last[slot] = s
	return s
}

// arenaBytes is the size of the blocks copy keeps its strings in. A
// block lives while any string in it does: a job left open pins its
// block, so the memory still follows the open jobs, a block's worth each
// at most.
const arenaBytes = 2 << 10

// copy is string(b), copied into the interner's current block: one
// allocation per block, not one per job id.
func (in *interner) copy(b []byte) string {
	if len(b) == 0 || len(b) > arenaBytes/8 {
		return string(b)
	}
	if len(in.arena)+len(b) > cap(in.arena) {
		in.arena = make([]byte, 0, arenaBytes)
	}
	at := len(in.arena)
	in.arena = append(in.arena, b...) // within cap: the bytes before never move or change
	return unsafe.String(&in.arena[at], len(b))
}

// lineParser applies a line's key=value pairs to a row as the line is
// tokenized. A pair is applied once the next key shows that no bare word
// can extend it; the first field error is kept, not returned, because a
// syntax error further along the line is the one the line reports.
type lineParser struct {
	row  *Row
	in   *interner
	seen uint64
	err  error
}

func (lp *lineParser) apply(id int, key, val []byte) {
	if lp.err != nil {
		return
	}
	bit, err := setField(lp.row, id, key, val, lp.in)
	if err != nil {
		lp.err = fmt.Errorf("%s: %w", key, err)
		return
	}
	if bit != 0 {
		if lp.seen&bit != 0 {
			lp.err = fmt.Errorf("%s: key appears twice", key)
			return
		}
		lp.seen |= bit
	}
}

// SWAR constants: one in every byte, and the top bit of every byte.
const (
	lowBytes  = 0x0101010101010101
	highBytes = 0x8080808080808080
)

// checkBytes refuses what no row holds: invalid UTF-8, and control bytes
// (the writer escapes them in quotes; a NUL is damage, not whitespace).
// It looks at eight bytes at a time for a byte below ' ', and only at a
// word that has one (a tab) byte by byte. ascii reports a line of ASCII
// only, which then holds no byte order mark.
func checkBytes(line []byte) (ascii bool, err error) {
	var high uint64
	i := 0
	// Four words at a time while no word has a byte below ' ': a row as
	// the writer writes it has none (a tab is the one allowed, and rare).
	for ; i+32 <= len(line); i += 32 {
		w0 := binary.LittleEndian.Uint64(line[i:])
		w1 := binary.LittleEndian.Uint64(line[i+8:])
		w2 := binary.LittleEndian.Uint64(line[i+16:])
		w3 := binary.LittleEndian.Uint64(line[i+24:])
		low := (w0-' '*lowBytes)&^w0 | (w1-' '*lowBytes)&^w1 | (w2-' '*lowBytes)&^w2 | (w3-' '*lowBytes)&^w3
		if low&highBytes != 0 {
			break // the word loop below finds the byte
		}
		high |= w0 | w1 | w2 | w3
	}
	for ; i+8 <= len(line); i += 8 {
		w := binary.LittleEndian.Uint64(line[i:])
		high |= w
		if (w-' '*lowBytes)&^w&highBytes == 0 {
			continue
		}
		for j := i; j < i+8; j++ {
			if c := line[j]; c < ' ' && c != '\t' {
				return false, controlOrUTF8(line, c, j)
			}
		}
	}
	for ; i < len(line); i++ {
		c := line[i]
		high |= uint64(c)
		if c < ' ' && c != '\t' {
			return false, controlOrUTF8(line, c, i)
		}
	}
	if high&highBytes == 0 {
		return true, nil
	}
	if !utf8.Valid(line) {
		return false, errors.New("not valid UTF-8")
	}
	return false, nil
}

// controlOrUTF8 is the error of a line with control byte c at i: invalid
// UTF-8 anywhere in the line is named first.
func controlOrUTF8(line []byte, c byte, i int) error {
	if !utf8.Valid(line) {
		return errors.New("not valid UTF-8")
	}
	return fmt.Errorf("control character 0x%02x at column %d", c, i+1)
}

// Byte classes for the tokenizer: what ends a key or a bare value.
const (
	inWord  = iota
	isSpace // ' ', or a byte below it (only a tab gets this far)
	isEqual
	isQuote
)

// wordEnd is the offset of the first byte from p on that ends a word or
// an unquoted value (a blank, '=' or '"'), or len(line). It looks at
// eight bytes at a time: in each, the lowest byte the masks flag is the
// first such byte (a borrow only ever flags bytes above a true one).
func wordEnd(line []byte, p int) int {
	for p+8 <= len(line) {
		w := binary.LittleEndian.Uint64(line[p:])
		m := (w - ('!' * lowBytes)) &^ w // a byte below '!'
		e := w ^ ('=' * lowBytes)
		m |= (e - lowBytes) &^ e // a '='
		q := w ^ ('"' * lowBytes)
		m |= (q - lowBytes) &^ q // a '"'
		if m &= highBytes; m != 0 {
			return p + bits.TrailingZeros64(m)/8
		}
		p += 8
	}
	for p < len(line) && byteClass[line[p]] == inWord {
		p++
	}
	return p
}

var byteClass = func() (t [256]uint8) {
	for c := range ' ' + 1 {
		t[c] = isSpace
	}
	t['='], t['"'] = isEqual, isQuote
	return t
}()

func parseLine(line []byte, row *Row, in *interner) error {
	ascii, err := checkBytes(line)
	if err != nil {
		return err
	}
	*row = Row{}
	lp := lineParser{row: row, in: in}
	var (
		n        int    // pairs so far
		key, val []byte // the last pair, not yet applied
		id       int    // its key's number
		vs       int    // offset of its value in the line, when unquoted
		quoted   bool   // it was quoted: it takes no bare words after it
		prev     int    // the number of the key before, for in.after
	)
	p := 0
	for p < len(line) {
		for p < len(line) && line[p] <= ' ' {
			p++
		}
		if p >= len(line) {
			break
		}
		start := p
		wordID := -1 // not known yet
		if in != nil {
			// The key that came next on the line before, when it is here:
			// the scan would stop at its '=' too.
			if k := in.after[prev]; k != 0 && keyPats[k].at(line, p) {
				wordID, p = int(k), p+len(keyNames[k])
			}
		}
		if wordID < 0 {
			p = wordEnd(line, p)
		}
		word := line[start:p]
		if p < len(line) && line[p] == '"' {
			return fmt.Errorf("unexpected '\"' at column %d", p+1)
		}
		if p >= len(line) || line[p] != '=' {
			// A bare word: part of the previous value (hand-written form).
			if n == 0 || quoted || len(val) == 0 {
				return fmt.Errorf("expected key=value, got %q", truncate(string(word)))
			}
			val = line[vs:p]
			continue
		}
		if len(word) == 0 {
			return fmt.Errorf("missing key before '=' at column %d", p+1)
		}
		if !ascii && bytes.Contains(word, []byte(bom)) {
			return fmt.Errorf("byte order mark in key %q at column %d", truncate(string(word)), start+1)
		}
		p++ // '='
		var v []byte
		q := false
		if p < len(line) && line[p] == '"' {
			end := p + 1
			for end < len(line) {
				if line[end] == '\\' {
					end += 2
					continue
				}
				if line[end] == '"' {
					break
				}
				end++
			}
			if end >= len(line) {
				return fmt.Errorf("%s: unterminated quoted value", word)
			}
			qv := line[p : end+1]
			if bytes.IndexByte(qv, '\\') < 0 {
				v = qv[1 : len(qv)-1]
			} else {
				u, err := strconv.Unquote(string(qv))
				if err != nil {
					return fmt.Errorf("%s: invalid quoted value %s", word, truncate(string(qv)))
				}
				v = []byte(u)
			}
			q = true
			p = end + 1
			if p < len(line) && line[p] > ' ' {
				return fmt.Errorf("%s: unexpected %q after quoted value", word, line[p])
			}
		} else {
			start := p
			p = wordEnd(line, p)
			if p < len(line) && byteClass[line[p]] != isSpace {
				return fmt.Errorf("%s: unexpected %q in value (quote values that contain it)", word, line[p])
			}
			v, vs = line[start:p], start
		}
		if n == MaxKeys {
			return fmt.Errorf("more than %d keys", MaxKeys)
		}
		if n > 0 {
			lp.apply(id, key, val)
		}
		if wordID < 0 {
			wordID = keyID(word)
		}
		if in != nil && wordID != keyUnknown {
			in.after[prev] = uint8(wordID)
			prev = wordID
		}
		key, val, quoted, id = word, v, q, wordID
		n++
	}
	if n > 0 {
		lp.apply(id, key, val)
	}
	if lp.err != nil {
		return lp.err
	}
	seen := lp.seen
	for _, k := range [...]struct {
		bit uint64
		key string
	}{{bitWait, "wait_s"}, {bitElapsed, "elapsed_s"}, {bitTokens, "tokens"}} {
		if seen&k.bit == 0 {
			return fmt.Errorf("missing required key %s", k.key)
		}
	}
	if row.HasSplit && seen&(bitPrompt|bitCompletion) != bitPrompt|bitCompletion {
		return errors.New("prompt_tokens and completion_tokens go together")
	}
	parts := seen & (bitPromptFrom | bitCompletionFrom)
	if (row.TokensFrom == FromMixed) != (parts == bitPromptFrom|bitCompletionFrom) || (parts != 0 && row.TokensFrom != FromMixed) {
		return errors.New("tokens_from=mixed goes with prompt_tokens_from and completion_tokens_from (written only when the two differ)")
	}
	return nil
}

const (
	bitTS uint64 = 1 << iota
	bitJob
	bitAttempt
	bitSeat
	bitModel
	bitWait
	bitElapsed
	bitTTFB
	bitTokens
	bitPrompt
	bitCompletion
	bitTokensFrom
	bitOutcome
	bitStatus
	bitBilling
	bitCost
	bitRetryAfter
	bitErrorCode
	bitDelay
	bitSpentS
	bitSpentTokens
	bitSpentUSD
	bitUsed
	bitDecision
	bitSent
	bitHoldout
	bitFallback
	bitJobEnd
	bitPromptSHA
	bitNote
	bitReserve
	bitConnect
	bitPromptFrom
	bitCompletionFrom
	bitTags
	bitITLMean
	bitITLMax
	bitInFlight
	bitWindowFirsts
	bitWindowRetries
)

// knownKeys are the keys this version reads; knownKeyCount bounds the
// unknown keys a row may carry within MaxKeys.
var knownKeys = map[string]bool{
	"ts": true, "job": true, "attempt": true, "seat": true, "model": true,
	"wait_s": true, "elapsed_s": true, "ttfb_s": true, "tokens": true,
	"prompt_tokens": true, "completion_tokens": true, "tokens_from": true,
	"prompt_tokens_from": true, "completion_tokens_from": true,
	"outcome": true, "http_status": true, "billing": true, "cost_usd": true,
	"retry_after_s": true, "error_code": true, "delay_s": true,
	"spent_s": true, "spent_tokens": true, "spent_usd": true, "used": true,
	"decision": true, "sent": true, "holdout": true, "fallback": true,
	"job_end": true, "prompt_sha": true, "note": true, "reserve_usd": true, "connect_s": true,
	"tags":       true,
	"itl_mean_s": true, "itl_max_s": true, "inflight": true,
	"window_firsts": true, "window_retries": true,
}

var knownKeyCount = len(knownKeys)

func knownKey(k string) bool { return knownKeys[k] }

// Known keys by number, for setField's switch: a key is found with a
// small hash and one comparison (a switch on the string compared it with
// several).
const (
	keyUnknown = iota
	keyTS
	keyJob
	keyAttempt
	keySeat
	keyModel
	keyWaitS
	keyElapsedS
	keyTTFB
	keyTokens
	keyPromptTokens
	keyCompletionTokens
	keyTokensFrom
	keyPromptTokensFrom
	keyCompletionTokensFrom
	keyOutcome
	keyHTTPStatus
	keyBilling
	keyCostUSD
	keyRetryAfterS
	keyErrorCode
	keyDelayS
	keySpentS
	keySpentTokens
	keySpentUSD
	keyUsed
	keyDecision
	keySent
	keyHoldout
	keyFallback
	keyJobEnd
	keyPromptSHA
	keyNote
	keyReserveUSD
	keyConnectS
	keyTags
	keyITLMean
	keyITLMax
	keyInFlight
	keyWindowFirsts
	keyWindowRetries
)

// numKeys is one more than the known keys' count: 0 is keyUnknown.
const numKeys = len(keyNames)

// keyNames are the known keys, in keyID's order from 1.
var keyNames = [...]string{"", "ts", "job", "attempt", "seat", "model", "wait_s", "elapsed_s", "ttfb_s", "tokens", "prompt_tokens", "completion_tokens", "tokens_from", "prompt_tokens_from", "completion_tokens_from", "outcome", "http_status", "billing", "cost_usd", "retry_after_s", "error_code", "delay_s", "spent_s", "spent_tokens", "spent_usd", "used", "decision", "sent", "holdout", "fallback", "job_end", "prompt_sha", "note", "reserve_usd", "connect_s", "tags", "itl_mean_s", "itl_max_s", "inflight", "window_firsts", "window_retries"}

// keyHash places a key of two bytes or more in keyTable; no two known
// keys share a slot (TestKeyHashPlacesEveryKnownKey).
func keyHash(k string) int {
	return (len(k) + int(k[0])*55 + int(k[len(k)-2])*2 + int(k[1])) & 127
}

var keyTable = func() (t [128]uint8) {
	for id, k := range keyNames[1:] {
		t[keyHash(k)] = uint8(id + 1)
	}
	return t
}()

// keyPat is a known key and its '=' as little-endian words, for a
// comparison in place of a few loads (a call to compare strings branches
// on their length, which no predictor guesses across a line's keys).
type keyPat struct {
	w, m [3]uint64 // the bytes, and which bytes of each word count
	n    int       // len(key) + 1
	s    string    // key + "="
}

var keyPats = func() (t [numKeys]keyPat) {
	for id, k := range keyNames[1:] {
		kp := &t[id+1]
		kp.s = k + "="
		kp.n = len(kp.s)
		for i := 0; i < kp.n; i++ {
			kp.w[i/8] |= uint64(kp.s[i]) << (8 * (i % 8))
			kp.m[i/8] |= 0xff << (8 * (i % 8))
		}
	}
	return t
}()

// at reports whether the key and its '=' start line at p.
func (k *keyPat) at(line []byte, p int) bool {
	if len(line)-p < 24 {
		return len(line)-p >= k.n && string(line[p:p+k.n]) == k.s
	}
	b := line[p : p+24]
	return binary.LittleEndian.Uint64(b)&k.m[0] == k.w[0] &&
		binary.LittleEndian.Uint64(b[8:])&k.m[1] == k.w[1] &&
		binary.LittleEndian.Uint64(b[16:])&k.m[2] == k.w[2]
}

// keyID is a known key's number, or keyUnknown.
func keyID(key []byte) int {
	if len(key) < 2 {
		return keyUnknown
	}
	k := unsafeString(key)
	id := int(keyTable[keyHash(k)])
	if id == keyUnknown || keyNames[id] != k {
		return keyUnknown
	}
	return id
}

// setField sets the field of key, whose number is id, from its value v.
func setField(row *Row, id int, key, v []byte, in *interner) (uint64, error) {
	var err error
	val := unsafeString(v) // valid only in this call; stored strings are copied or interned
	switch id {
	case keyTS:
		ts, ok := writtenTS(val)
		if !ok {
			if ts, err = time.Parse(time.RFC3339Nano, val); err != nil {
				return 0, fmt.Errorf("not an RFC 3339 time %q", truncate(string(v)))
			}
		}
		row.TS = ts.UTC()
		if err := CheckTS(row.TS); err != nil {
			return 0, err
		}
		return bitTS, nil
	case keyJob:
		if val == "" {
			return 0, errors.New("empty job id")
		}
		row.Job = in.recent(slotJob, v)
		return bitJob, nil
	case keyAttempt:
		n, err := parseCount(val)
		if err != nil || n < 1 || n > admit.MaxAttempts {
			return 0, fmt.Errorf("not an attempt number in 1…%d %q", admit.MaxAttempts, truncate(val))
		}
		row.Attempt = int(n)
		return bitAttempt, nil
	case keySeat:
		row.Seat = in.str(slotSeat, v)
		return bitSeat, nil
	case keyModel:
		row.Model = in.str(slotModel, v)
		return bitModel, nil
	case keyWaitS:
		row.Wait, err = parseSeconds(val)
		return bitWait, err
	case keyElapsedS:
		row.Elapsed, err = parseSeconds(val)
		return bitElapsed, err
	case keyTTFB:
		row.TTFB, err = parseSeconds(val)
		row.HasTTFB = true
		return bitTTFB, err
	case keyTokens:
		row.Tokens, err = parseCount(val)
		return bitTokens, err
	case keyPromptTokens:
		row.PromptTokens, err = parseCount(val)
		row.HasSplit = true
		return bitPrompt, err
	case keyCompletionTokens:
		row.CompletionTokens, err = parseCount(val)
		row.HasSplit = true
		return bitCompletion, err
	case keyTokensFrom:
		if !knownSource(val, true) {
			return 0, fmt.Errorf("unknown source %q (want usage, tokenizer, script, hand or mixed)", truncate(val))
		}
		row.TokensFrom = in.str(slotTokensFrom, v)
		return bitTokensFrom, nil
	case keyPromptTokensFrom, keyCompletionTokensFrom:
		if !knownSource(val, false) {
			return 0, fmt.Errorf("unknown source %q (want usage, tokenizer, script or hand)", truncate(val))
		}
		if key[0] == 'p' {
			row.PromptFrom = in.str(slotPromptFrom, v)
			return bitPromptFrom, nil
		}
		row.CompletionFrom = in.str(slotCompletionFrom, v)
		return bitCompletionFrom, nil
	case keyOutcome:
		o, err := admit.ParseOutcome(val)
		row.Outcome = o // one of the package's constants, not val
		return bitOutcome, err
	case keyHTTPStatus:
		n, err := parseCount(val)
		if err != nil || n < 100 || n > 999 {
			return 0, fmt.Errorf("not an HTTP status %q", truncate(val))
		}
		row.HTTPStatus = int(n)
		return bitStatus, nil
	case keyBilling:
		switch admit.Billing(val) {
		case admit.Billable, admit.Free, admit.Ambiguous:
			row.Billing = admit.Billing(in.str(slotBilling, v))
			return bitBilling, nil
		}
		return 0, fmt.Errorf("unknown billing %q (want billable, free or ambiguous)", truncate(val))
	case keyCostUSD:
		row.CostUSD, err = parseUSD(val)
		row.HasCost = true
		return bitCost, err
	case keyConnectS:
		row.Connect, err = parseSeconds(val)
		row.HasConnect = true
		return bitConnect, err
	case keyITLMean:
		row.ITLMean, err = parseSeconds(val)
		row.HasITL = true
		return bitITLMean, err
	case keyITLMax:
		row.ITLMax, err = parseSeconds(val)
		row.HasITL = true
		return bitITLMax, err
	case keyReserveUSD:
		row.ReserveUSD, err = parseUSD(val)
		return bitReserve, err
	case keyRetryAfterS:
		row.RetryAfter, err = parseSeconds(val)
		row.HasRetryAfter = true
		return bitRetryAfter, err
	case keyErrorCode:
		row.ErrorCode = in.str(slotErrorCode, v)
		return bitErrorCode, nil
	case keyDelayS:
		row.Delay, err = parseSeconds(val)
		return bitDelay, err
	case keySpentS:
		row.SpentS, err = parseSeconds(val)
		row.HasSpent = true
		return bitSpentS, err
	case keySpentTokens:
		row.SpentTokens, err = parseCount(val)
		row.HasSpent = true
		return bitSpentTokens, err
	case keySpentUSD:
		row.SpentUSD, err = parseUSD(val)
		return bitSpentUSD, err
	case keyWindowFirsts, keyWindowRetries:
		n, err := parseCount(val)
		if err != nil || n > maxWindowCount {
			return 0, fmt.Errorf("not a count in 0…%d %q", maxWindowCount, truncate(val))
		}
		row.HasWindow = true
		if id == keyWindowFirsts {
			row.Window.Firsts = int(n)
			return bitWindowFirsts, nil
		}
		row.Window.Retries = int(n)
		return bitWindowRetries, nil
	case keyUsed:
		n, err := parseCount(val)
		if err != nil || n > admit.MaxAttempts {
			return 0, fmt.Errorf("not a count of attempts in 0…%d %q", admit.MaxAttempts, truncate(val))
		}
		row.Used = int(n)
		row.HasSpent = true
		return bitUsed, nil
	case keyInFlight:
		n, err := parseCount(val)
		if err != nil || n > admit.MaxAttempts {
			return 0, fmt.Errorf("not a count of attempts in 0…%d %q", admit.MaxAttempts, truncate(val))
		}
		row.InFlight = int(n)
		return bitInFlight, nil
	case keyDecision:
		// The decision of the row before was read already (in.str keeps
		// it only after ParseDecision took it).
		if in == nil || val == "" || val != in.last[slotDecision] {
			if _, err := admit.ParseDecision(val); err != nil {
				return 0, err
			}
		}
		row.Decision = in.str(slotDecision, v)
		return bitDecision, nil
	case keySent:
		b, err := parseBool(val)
		row.Unsent = !b
		return bitSent, err
	case keyHoldout:
		row.Holdout, err = parseBool(val)
		return bitHoldout, err
	case keyFallback:
		row.Fallback, err = parseBool(val)
		return bitFallback, err
	case keyJobEnd:
		switch val {
		case JobSucceeded, JobFailed, JobUnknown, JobCancelled:
			row.JobEnd = in.str(slotJobEnd, v)
			return bitJobEnd, nil
		}
		return 0, fmt.Errorf("unknown job end %q (want succeeded, failed, unknown or cancelled)", truncate(val))
	case keyPromptSHA:
		row.PromptSHA = in.recent(slotPromptSHA, v)
		return bitPromptSHA, nil
	case keyTags:
		row.Tags = string(v)
		return bitTags, nil
	case keyNote:
		row.Note = string(v)
		return bitNote, nil
	}
	row.Extra = append(row.Extra, KV{string(key), string(v)})
	return 0, nil
}

func parseSeconds(s string) (time.Duration, error) {
	if d, ok := decimalSeconds(s); ok {
		if d > admit.MaxDuration {
			return 0, fmt.Errorf("more than %.0f seconds %q", admit.MaxDuration.Seconds(), truncate(s))
		}
		return d, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a number %q", truncate(s))
	}
	if f < 0 {
		return 0, fmt.Errorf("negative seconds %q", truncate(s))
	}
	if f > admit.MaxDuration.Seconds() {
		return 0, fmt.Errorf("more than %.0f seconds %q", admit.MaxDuration.Seconds(), truncate(s))
	}
	return time.Duration(math.Round(f * 1e9)), nil
}

// decimalSeconds reads plain decimal seconds ("7.200", "18") exactly, to
// the nanosecond, so what the writer wrote in milliseconds reads back as
// the same duration (a float would turn 4194304.008 into …008000001).
// ok is false for any other form, which then goes through ParseFloat.
func decimalSeconds(s string) (d time.Duration, ok bool) {
	var sec, ns int64
	i := 0
	for ; i < len(s) && s[i] != '.'; i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		sec = sec*10 + int64(c-'0')
	}
	if i == 0 || i > 10 {
		return 0, false
	}
	scale := int64(1e8)
	for i++; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		switch {
		case scale > 0:
			ns += int64(c-'0') * scale
			scale /= 10
		case scale == 0 && c >= '5':
			ns++ // round half up at the tenth digit
			scale = -1
		default:
			scale = -1
		}
	}
	return time.Duration(sec)*time.Second + time.Duration(ns), true
}

func parseCount(s string) (int64, error) {
	if n, ok := digits(s); ok && n <= admit.MaxTokens {
		return n, nil
	}
	return admit.ParseCount(s)
}

// digits reads a plain run of decimal digits short enough not to
// overflow; ok is false for anything else (a sign, a long number), which
// strconv then reads.
func digits(s string) (n int64, ok bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// writtenTS reads ts in the form the writer writes it,
// 2006-01-02T15:04:05.999999999Z, to the same time time.Parse gives;
// ok is false for every other form (offsets, a comma, a lower-case t,
// a day past the month's end), which then goes through time.Parse.
func writtenTS(s string) (time.Time, bool) {
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' || s[len(s)-1] != 'Z' {
		return time.Time{}, false
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	sec, ok6 := digits(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return time.Time{}, false
	}
	var ns int64
	if frac := s[19 : len(s)-1]; len(frac) > 0 {
		if frac[0] != '.' || len(frac) < 2 || len(frac) > 10 {
			return time.Time{}, false
		}
		n, ok := digits(frac[1:])
		if !ok {
			return time.Time{}, false
		}
		for range 10 - len(frac) {
			n *= 10
		}
		ns = n
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	days := daysFromCivil(year, month, day)
	return time.Unix(days*86400+hour*3600+minute*60+sec, ns).UTC(), true
}

// daysFromCivil is the days from 1970-01-01 to a valid proleptic
// Gregorian date (year 0 … 9999): time.Date's instant for it at
// midnight UTC, without time.Date's normalising (Howard Hinnant's
// days_from_civil).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := (y - 399*(y>>63&1)) / 400 // floor division: y is -1 for January of year 0
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func daysIn(month, year int64) int64 {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

func parseUSD(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a number %q", truncate(s))
	}
	if f < 0 {
		return 0, fmt.Errorf("negative amount %q", truncate(s))
	}
	if f > admit.MaxUSD {
		return 0, fmt.Errorf("amount over %.0f %q", admit.MaxUSD, truncate(s))
	}
	return f, nil
}

func parseBool(s string) (bool, error) {
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("not true or false %q", truncate(s))
}

// truncate shortens s for an error message, copying it (s may alias a
// reused line buffer).
func truncate(s string) string {
	if len(s) > 40 {
		return strings.ToValidUTF8(s[:40], "") + "…"
	}
	return strings.Clone(s)
}

// unsafeString views b as a string without copying, for parsing only.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
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
