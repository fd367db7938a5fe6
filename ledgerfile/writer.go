package ledgerfile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Writer appends rows to a log. The log is opened once, at the first row;
// each row is then one write(2) on the O_APPEND descriptor, made while
// holding the log's advisory lock (FileLock), so rows from many processes
// never interleave: lock, fstat, write, unlock for each row, or for a
// batch of whole rows (see Batch). It never truncates,
// rewrites or reorders what is there, follows no symbolic link and
// appends only to a regular file.
type Writer struct {
	path  string
	fsync bool

	mu   sync.Mutex
	f    *os.File
	lock *FileLock
	end  int64 // the file's size after our last write: its last byte is our newline; -1 unknown
	buf  []byte

	// batching (see Batch): rows encoded but not yet written, and when
	// they will be
	batch   bool
	maxHeld int
	every   time.Duration
	held    []byte
	timer   *time.Timer
	err     error // a batched write's failure, reported by the next call

	// onReopen (see OnReopen) and the comment it gave for the reopened
	// file, written before the next lines there.
	onReopen func(why string) string
	note     string
}

// OnReopen sets fn to be told when the log's path no longer names the
// file the writer has open (why: "removed", or "replaced" by another
// file), which the writer then opens again by its path (making it anew
// when it was removed). fn returns a comment text ("" for none) written
// at that point of the reopened file, before the rows that follow: the
// log says where its earlier part went. fn runs under the writer's
// lock: it must not call the writer.
func (w *Writer) OnReopen(fn func(why string) string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onReopen = fn
}

// NewWriter prepares to append to path. Nothing is opened until the first
// row, so a run that fails before its first row leaves no file behind.
func NewWriter(path string, fsync bool) *Writer {
	return &Writer{path: path, fsync: fsync, end: -1}
}

// Batch makes Append hold whole rows in memory and write them together:
// when maxBytes of them are held, when every has passed since the first
// of them, before any locked call (a comment lands after the rows before
// it), and at Flush and Close. Each write is still whole rows, appended
// under the lock in one write(2), so the many-writers contract holds; a
// process killed outright loses at most the rows it held. A failed
// batched write is reported by the next Append, Flush or Close. Call it
// before the first Append.
func (w *Writer) Batch(maxBytes int, every time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batch, w.maxHeld, w.every = true, max(maxBytes, 1), every
}

// Path is the log's path.
func (w *Writer) Path() string { return w.path }

func (w *Writer) open() error {
	if w.f != nil {
		return nil
	}
	// Read-write so that a locked caller can read the log's tail through
	// the same descriptor (see LockedTail).
	f, err := openRegular(w.path, "log", os.O_RDWR|os.O_APPEND|os.O_CREATE|noFollow|nonBlock, 0o644)
	if err != nil {
		return err
	}
	if err := checkIsLog(f, w.path); err != nil {
		f.Close()
		return err
	}
	w.f, w.lock = f, NewFileLock(w.path)
	return nil
}

// ErrCannotHold is a row or event line a writer refuses, whatever the
// log's state: writing it again fails again (errors.Is).
var ErrCannotHold = errors.New("the log cannot hold it")

type cannotHold struct {
	what string
	err  error
}

func (e *cannotHold) Error() string {
	return "refusing to write " + e.what + " the log cannot hold: " + e.err.Error()
}
func (e *cannotHold) Unwrap() []error { return []error{ErrCannotHold, e.err} }

// ErrNotALog is a file a writer refuses to append to: it holds something
// other than a rehearsal log (a config, notes), which rows would spoil.
var ErrNotALog = errors.New("not a rehearsal log")

// checkIsLog lets a writer append only to an empty file or a log: one whose
// first line is the header or, for a log written before the header existed
// or by hand, whose first line that is neither blank nor a comment reads
// as a row, or is written with a row's keys (ts=, job=, wait_s=, …: its
// reader will name a bad value there); a line cut short by a crash (the
// file's last, or one the torn marker follows) need only look like text. Every
// writer opens here. The error says what the file looks like and never
// quotes it: it may hold a secret.
func checkIsLog(f *os.File, path string) error {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	sc := bufio.NewScanner(io.NewSectionReader(f, 0, st.Size()))
	sc.Buffer(nil, MaxLine+1)
	sc.Split(scanLinesTorn)
	var first []byte // a line that is no row, unless the torn marker follows it
	at := 0
	for n := 1; sc.Scan(); n++ {
		raw := sc.Bytes()
		line := bytes.TrimSpace(raw)
		switch {
		case first != nil && string(line) == TornMarker:
			first = nil // it was a torn row
			continue
		case first != nil:
			return notALog(path, first, at)
		case n == 1 && string(line) == Header:
			return nil
		case len(line) == 0 || line[0] == '#':
			continue
		}
		var r Row
		torn := raw[len(raw)-1] != '\n' // the file's last line, cut short
		switch what := looksLike(line, raw); {
		case ParseLine(line, &r) == nil || rowKeys().Match(line):
			return nil // a row, or one with a bad value that its reader names
		case torn && what == "text":
			return nil // marked torn by the next append
		}
		first, at = slices.Clone(line), n
	}
	if first != nil {
		return notALog(path, first, at)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("refusing to append to %q: it looks like %s, %w (a line longer than %d bytes)", path, "binary data", ErrNotALog, MaxLine)
	}
	return nil // blank lines and comments only
}

func notALog(path string, line []byte, n int) error {
	return fmt.Errorf("refusing to append to %q: it looks like %s, %w (line %d is no row, comment or header of one)",
		path, looksLike(line, line), ErrNotALog, n)
}

// scanLinesTorn is bufio.ScanLines keeping each line's newline, so a last
// line without one is told apart.
func scanLinesTorn(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i+1], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// rowKeys are a row's own keys, written as the log writes them.
var rowKeys = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(^|\s)(ts|job|attempt|wait_s|elapsed_s|tokens)=`) })

// looksLike names what a file whose first significant line is line seems
// to be, for the error refusing it.
func looksLike(line, raw []byte) string {
	switch {
	case bytes.IndexByte(raw, 0) >= 0 || !utf8.Valid(raw):
		return "binary data"
	case tomlTable().Match(line):
		return "TOML"
	case line[0] == '{' || line[0] == '[':
		return "JSON"
	case bytes.HasPrefix(line, []byte("---")) || bytes.HasPrefix(line, []byte("- ")) || yamlKey().Match(line):
		return "YAML"
	case envLine().Match(line):
		return "an environment file"
	case tomlKey().Match(line):
		return "TOML"
	}
	return "text"
}

var (
	tomlTable = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\[\[?[A-Za-z0-9_."-]+\]\]?$`) })
	yamlKey   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^["']?[A-Za-z0-9_.-]+["']?:(\s|$)`) })
	envLine   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(export\s+)?[A-Z_][A-Z0-9_]*=`) })
	tomlKey   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]+\s*=`) })
)

// lockOpen opens the log if need be and takes its lock; the caller
// unlocks. The lock opens the log's path afresh: when that is no longer
// the file the writer has open (the log was removed, or another file
// put at its path), the rows would go to a file nobody can read, so
// the writer opens the path again, as at its first row.
func (w *Writer) lockOpen() error {
	for try := 0; ; try++ {
		if err := w.open(); err != nil {
			return err
		}
		why := ""
		switch err := w.lock.Lock(context.Background()); {
		case errors.Is(err, fs.ErrNotExist):
			why = "removed"
		case err != nil:
			return fmt.Errorf("failed to lock log %q: %w", w.path, unwrapPath(err))
		case !w.current():
			_ = w.lock.Unlock()
			why = "replaced"
		default:
			return nil
		}
		if try == 2 {
			return fmt.Errorf("failed to lock log %q: its path keeps naming another file", w.path)
		}
		_ = w.f.Close()
		w.f, w.end = nil, -1
		if w.onReopen != nil {
			w.note = w.onReopen(why)
		}
	}
}

// current reports whether the file the lock opened by the path is the
// one the writer has open.
func (w *Writer) current() bool {
	at, err := w.lock.Stat()
	if err != nil {
		return false
	}
	own, err := w.f.Stat()
	return err == nil && os.SameFile(at, own)
}

// Locked runs fn while holding the log's lock, then appends the rows fn
// returns.
func (w *Writer) Locked(fn func() ([]Row, error)) error {
	return w.LockedTail(func(io.ReaderAt, int64) ([]Row, error) { return fn() })
}

// LockedTail runs fn while holding the log's lock, giving it the log as it
// stands (read through the writer's own descriptor, size bytes long), then
// appends the rows fn returns. fn may read the log (see ReadJobTail)
// knowing no other writer can append in between: this is how `record`
// numbers attempts without gaps or duplicates under many writers.
func (w *Writer) LockedTail(fn func(log io.ReaderAt, size int64) ([]Row, error)) error {
	return w.locked(func(size int64) error {
		rows, err := fn(w.f, size)
		for i := 0; err == nil && i < len(rows); i++ {
			w.buf, err = appendChecked(w.buf, &rows[i]) // all of rows, or none
		}
		return err
	})
}

// locked runs fn while holding the log's lock, after the rows Append
// holds, giving it the log's size; then it appends the lines fn put in
// w.buf, unless fn failed.
func (w *Writer) locked(fn func(size int64) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.flushHeld(); err != nil {
		return err
	}
	if err := w.lockOpen(); err != nil {
		return err
	}
	defer w.lock.Unlock()
	size, err := w.size()
	if err != nil {
		return err
	}
	w.buf = w.buf[:0]
	if err := fn(size); err != nil || len(w.buf) == 0 {
		return err
	}
	return w.appendAt(size, w.buf)
}

// Append writes rows, each as one line, in one write (or, batching,
// holds them for the next one).
func (w *Writer) Append(rows ...Row) error {
	if !w.batch {
		return w.LockedTail(func(io.ReaderAt, int64) ([]Row, error) { return rows, nil })
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	start := len(w.held)
	for i := range rows {
		if err := w.hold(&rows[i]); err != nil {
			w.held = w.held[:start] // all of rows, or none
			return err
		}
	}
	return w.scheduleHeld()
}

// AppendOne is Append for one row, which it does not keep: a batching
// writer holds its encoded line, so a row a second costs no copy of it.
func (w *Writer) AppendOne(r *Row) error {
	if !w.batch {
		return w.Append(*r)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if err := w.hold(r); err != nil {
		return err
	}
	return w.scheduleHeld()
}

// hold encodes r onto the held rows, or refuses it.
func (w *Writer) hold(r *Row) (err error) {
	w.held, err = appendChecked(w.held, r)
	return err
}

// appendChecked appends r's line to dst (AppendRow), or refuses a row
// the log cannot hold (Check) and returns dst as it was.
func appendChecked(dst []byte, r *Row) ([]byte, error) {
	n := *r
	Normalize(&n)
	if err := Check(&n); err != nil {
		return dst, &cannotHold{"a row", err}
	}
	return appendNormalized(dst, &n), nil
}

// scheduleHeld writes the held rows when they fill a batch, else makes
// sure a write is due within every.
func (w *Writer) scheduleHeld() error {
	if len(w.held) >= w.maxHeld {
		return w.flushHeld()
	}
	if w.timer == nil && len(w.held) > 0 {
		w.timer = time.AfterFunc(w.every, w.flushLater)
	}
	return nil
}

// Flush writes the rows Append holds, if any, and reports a batched
// write that failed.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushHeld()
}

// flushLater is the timer's flush: its failure waits for the next call.
func (w *Writer) flushLater() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = nil
	_ = w.flushHeld()
}

// flushHeld writes the held rows in one write(2) under the lock. A
// failure is kept for every later call: the rows it held are not in the
// log, and the caller must stop rather than go on with a gap.
func (w *Writer) flushHeld() error {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if w.err != nil || len(w.held) == 0 {
		return w.err
	}
	held := w.held
	w.held = w.held[:0]
	if err := w.lockOpen(); err != nil {
		w.err = err
		return err
	}
	defer w.lock.Unlock()
	size, err := w.size()
	if err == nil {
		err = w.appendAt(size, held)
	}
	w.err = err
	return err
}

// CommentLocked runs fn while holding the log's lock, then appends the
// text it returns as one comment line ("# " + text; newlines become
// spaces). It is Locked for a comment: `rehearse` reads the highest run
// number and reserves the next one with a `# run rN …` line, so two runs
// into one log never pick the same job ids. An empty text appends nothing.
func (w *Writer) CommentLocked(fn func() (string, error)) error {
	return w.locked(func(int64) error {
		text, err := fn()
		if err == nil && text != "" {
			w.buf = append(append(w.buf, CommentLine(text)...), '\n')
		}
		return err
	})
}

// CommentLine is the line a comment text makes, in every store: "# " +
// text, newlines made spaces.
func CommentLine(text string) string { return "# " + newlines.Replace(text) }

var newlines = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ")

// Comment appends one comment line ("# " + text) under the lock.
func (w *Writer) Comment(text string) error {
	return w.CommentLocked(func() (string, error) { return text, nil })
}

// Event appends one `# event` line (see Event) under the lock, after the
// rows Append holds: one write(2), repairing a torn tail first, as a row.
// An event the log cannot hold is refused and nothing is written.
func (w *Writer) Event(e *Event) error {
	line, err := FormatEvent(e)
	if err != nil {
		return err
	}
	return w.Comment(line[len("# "):])
}

func (w *Writer) size() (int64, error) {
	st, err := w.f.Stat()
	if err != nil {
		return 0, fmt.Errorf("failed to stat log %q: %w", w.path, unwrapPath(err))
	}
	return st.Size(), nil
}

// appendAt appends whole lines b to the log of size bytes, after the
// prefix it needs (see prefix), in one write(2). A short write (a full
// disk) must not leave half a row: the file is put back as it was. We
// hold the lock, so the bytes past size are ours alone.
func (w *Writer) appendAt(size int64, b []byte) error {
	prefix, err := w.prefix(size)
	if err != nil {
		return err
	}
	if w.note != "" {
		prefix = append(append(prefix, CommentLine(w.note)...), '\n')
	}
	if len(prefix) > 0 {
		b = append(prefix, b...) // a new file, a torn tail, a reopened log: rare
	}
	n, err := w.f.Write(b)
	if err != nil {
		if n > 0 {
			_ = w.f.Truncate(size)
		}
		w.end = -1
		return fmt.Errorf("failed to append to log %q: %w", w.path, unwrapPath(err))
	}
	w.end, w.note = size+int64(n), ""
	if w.fsync {
		if err := w.f.Sync(); err != nil {
			return fmt.Errorf("failed to sync log %q: %w", w.path, unwrapPath(err))
		}
	}
	return nil
}

// prefix is what must precede the next row: the header for a new file, or
// a newline and the torn marker when a crashed writer left a partial line.
// When the file ends where our own last write did, its last byte is our
// newline and is not read again.
func (w *Writer) prefix(size int64) ([]byte, error) {
	if size == 0 {
		return []byte(Header + "\n"), nil
	}
	if size == w.end {
		return nil, nil
	}
	var last [1]byte
	if _, err := w.f.ReadAt(last[:], size-1); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("failed to read log %q: %w", w.path, unwrapPath(err))
	}
	if last[0] != '\n' {
		return []byte("\n" + TornMarker + "\n"), nil
	}
	return nil, nil
}

// Close writes any rows Append holds and releases the log; it reports a
// batched write that failed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	ferr := w.flushHeld()
	if w.f == nil {
		return ferr
	}
	err := w.f.Close()
	w.f = nil
	return errors.Join(ferr, err)
}

// ReadJob reads every row of one job from the log at path (all rows when
// job is ""), forward and strictly. A missing log has no rows. For one
// job's spend and numbering, ReadJobTail reads only the end of the log.
func ReadJob(path, job string) ([]Row, error) {
	rows, _, err := ReadFile(path)
	if err != nil || job == "" {
		return rows, err
	}
	out := rows[:0]
	for _, r := range rows {
		if r.Job == job {
			out = append(out, r)
		}
	}
	return out, nil
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
