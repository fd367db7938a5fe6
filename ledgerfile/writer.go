package ledgerfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/gofrs/flock"
)

// Writer appends rows to a log. Each row is one write(2) on an O_APPEND
// descriptor, made while holding an advisory lock on the log itself, so
// rows from many processes never interleave. It never truncates, rewrites
// or reorders what is there; the file is created only at the first row.
type Writer struct {
	path  string
	fsync bool

	mu   sync.Mutex
	f    *os.File
	lock *flock.Flock
	buf  []byte
}

// NewWriter prepares to append to path. Nothing is opened until the first
// row, so a run that fails before its first row leaves no file behind.
func NewWriter(path string, fsync bool) *Writer {
	return &Writer{path: path, fsync: fsync}
}

// Path is the log's path.
func (w *Writer) Path() string { return w.path }

func (w *Writer) open() error {
	if w.f != nil {
		return nil
	}
	if st, err := os.Stat(w.path); err == nil && st.IsDir() {
		return fmt.Errorf("failed to open log %q: is a directory", w.path)
	}
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("failed to open log %q: %w", w.path, unwrapPath(err))
	}
	w.f = f
	w.lock = flock.New(w.path, flock.SetFlag(os.O_RDONLY))
	return nil
}

// Locked runs fn while holding the log's lock, then appends the rows fn
// returns. fn may read the log (see ReadJob) knowing no other writer can
// append in between: this is how `record` numbers attempts without gaps
// or duplicates under many concurrent writers.
func (w *Writer) Locked(fn func() ([]Row, error)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.open(); err != nil {
		return err
	}
	if err := w.lock.Lock(); err != nil {
		return fmt.Errorf("failed to lock log %q: %w", w.path, unwrapPath(err))
	}
	defer w.lock.Unlock()
	rows, err := fn()
	if err != nil {
		return err
	}
	return w.appendLocked(rows)
}

// Append writes rows, each as one line.
func (w *Writer) Append(rows ...Row) error {
	return w.Locked(func() ([]Row, error) { return rows, nil })
}

// CommentLocked runs fn while holding the log's lock, then appends the
// text it returns as one comment line ("# " + text; newlines become
// spaces). It is Locked for a comment: `rehearse` reads the highest run
// number and reserves the next one with a `# run rN …` line, so two runs
// into one log never pick the same job ids. An empty text appends nothing.
func (w *Writer) CommentLocked(fn func() (string, error)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.open(); err != nil {
		return err
	}
	if err := w.lock.Lock(); err != nil {
		return fmt.Errorf("failed to lock log %q: %w", w.path, unwrapPath(err))
	}
	defer w.lock.Unlock()
	text, err := fn()
	if err != nil || text == "" {
		return err
	}
	st, err := w.f.Stat()
	if err != nil {
		return fmt.Errorf("failed to stat log %q: %w", w.path, unwrapPath(err))
	}
	prefix, err := w.prefix(st.Size())
	if err != nil {
		return err
	}
	text = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(text)
	w.buf = append(append(append(append(w.buf[:0], prefix...), "# "...), text...), '\n')
	if n, err := w.f.Write(w.buf); err != nil {
		if n > 0 {
			_ = w.f.Truncate(st.Size())
		}
		return fmt.Errorf("failed to append to log %q: %w", w.path, unwrapPath(err))
	}
	if w.fsync {
		if err := w.f.Sync(); err != nil {
			return fmt.Errorf("failed to sync log %q: %w", w.path, unwrapPath(err))
		}
	}
	return nil
}

// Comment appends one comment line ("# " + text) under the lock.
func (w *Writer) Comment(text string) error {
	return w.CommentLocked(func() (string, error) { return text, nil })
}

func (w *Writer) appendLocked(rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	st, err := w.f.Stat()
	if err != nil {
		return fmt.Errorf("failed to stat log %q: %w", w.path, unwrapPath(err))
	}
	size := st.Size()
	prefix, err := w.prefix(size)
	if err != nil {
		return err
	}
	for i := range rows {
		w.buf = append(w.buf[:0], prefix...)
		prefix = nil
		w.buf = AppendRow(w.buf, &rows[i])
		n, err := w.f.Write(w.buf)
		if err != nil {
			// A short write (a full disk) must not leave half a row: put the
			// file back as it was. We hold the lock, so the bytes past size
			// are ours alone.
			if n > 0 {
				_ = w.f.Truncate(size)
			}
			return fmt.Errorf("failed to append to log %q: %w", w.path, unwrapPath(err))
		}
		size += int64(n)
	}
	if w.fsync {
		if err := w.f.Sync(); err != nil {
			return fmt.Errorf("failed to sync log %q: %w", w.path, unwrapPath(err))
		}
	}
	return nil
}

// prefix is what must precede the next row: the header for a new file, or
// a newline and the torn marker when a crashed writer left a partial line.
func (w *Writer) prefix(size int64) ([]byte, error) {
	if size == 0 {
		return []byte(Header + "\n"), nil
	}
	var last [1]byte
	r, err := os.Open(w.path)
	if err != nil {
		return nil, fmt.Errorf("failed to read log %q: %w", w.path, unwrapPath(err))
	}
	defer r.Close()
	if _, err := r.ReadAt(last[:], size-1); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("failed to read log %q: %w", w.path, unwrapPath(err))
	}
	if last[0] != '\n' {
		return []byte("\n" + TornMarker + "\n"), nil
	}
	return nil, nil
}

// Close releases the log.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	_ = w.lock.Close()
	w.f = nil
	return err
}

// ReadJob reads the rows of one job from the log at path (all rows when
// job is ""). Lines that cannot belong to the job are skipped before they
// are parsed, so numbering one job's attempt in a long log stays cheap.
// A torn tail is skipped; any other bad line is an error.
func ReadJob(path, job string) ([]Row, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to open log %q: %w", path, unwrapPath(err))
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("failed to read log %q: is a directory", path)
	}
	var src io.Reader = f
	if job != "" {
		src = &jobFilter{r: NewLineFilter(f), needle: []byte(job)}
	}
	rows, _, err := ReadAll(src, path)
	if err != nil {
		return nil, err
	}
	if job == "" {
		return rows, nil
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

// jobFilter blanks every line that does not contain the job id (keeping
// the newline, so line numbers stay right) before the reader parses it.
type jobFilter struct {
	r      *LineFilter
	needle []byte
	out    []byte
}

func (j *jobFilter) Read(p []byte) (int, error) {
	for len(j.out) == 0 {
		line, err := j.r.Next()
		if len(line) > 0 {
			keep := bytes.Contains(line, j.needle) || bytes.HasPrefix(bytes.TrimSpace(line), []byte("#"))
			if keep {
				j.out = line
			} else if line[len(line)-1] == '\n' {
				j.out = []byte{'\n'}
			} else {
				j.out = line // a torn tail stays torn
			}
		}
		if err != nil && len(j.out) == 0 {
			return 0, err
		}
	}
	n := copy(p, j.out)
	j.out = j.out[n:]
	return n, nil
}
