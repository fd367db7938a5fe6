package ledgerfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrLineTooLong is a line past a LineReader's limit.
var ErrLineTooLong = errors.New("line too long")

// LineReader is the one bounded line reader for every line-based file the
// tool reads (logs, and whatever else is read a line at a time): no line
// may run past Max bytes, so memory stays bounded whatever the file holds
// (/dev/zero, a 1 GB line). Lines are numbered from 1; a UTF-8 byte order
// mark at the very start of the input is dropped.
type LineReader struct {
	name string
	max  int
	br   *bufio.Reader
	line int
	long []byte
	eof  bool

	skipping bool // in an over-long line Next refused
}

// NewLineReader reads lines of at most max bytes (newline excluded; max
// <= 0 means MaxLine) from r; name is the file named in errors.
func NewLineReader(r io.Reader, name string, max int) *LineReader {
	if max <= 0 {
		max = MaxLine
	}
	return &LineReader{name: name, max: max, br: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next line without its newline (valid until the next
// call), its number, and whether it ended at the end of the input without
// a newline (a writer's torn tail, in a log). It returns io.EOF after the
// last line. A line longer than the limit is a *LineError wrapping
// ErrLineTooLong and naming the file and line, returned as soon as the
// limit is passed (an endless line from a device is refused at once);
// the next call first skips the rest of that line.
func (l *LineReader) Next() (line []byte, no int, noNewline bool, err error) {
	if l.skipping {
		if _, err := l.SkipRest(); err != nil {
			return nil, l.line, false, err
		}
	}
	if l.eof {
		return nil, l.line, false, io.EOF
	}
	l.long = l.long[:0]
	for {
		chunk, err := l.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(l.long)+len(chunk) > l.max {
				l.line++
				l.skipping, l.long = true, l.long[:0]
				return nil, l.line, false, &LineError{File: l.name, Line: l.line, Err: fmt.Errorf("%w (over %d bytes)", ErrLineTooLong, l.max)}
			}
			l.long = append(l.long, chunk...)
			continue
		}
		if err != nil && err != io.EOF {
			return nil, l.line, false, fmt.Errorf("failed to read %q: %w", l.name, err)
		}
		if err == io.EOF {
			l.eof = true
			if len(l.long)+len(chunk) == 0 {
				return nil, l.line, false, io.EOF
			}
		}
		l.line++
		if len(l.long) > 0 {
			l.long = append(l.long, chunk...)
			chunk = l.long
		}
		if err == nil {
			chunk = chunk[:len(chunk)-1]
		}
		if len(chunk) > l.max {
			return nil, l.line, err == io.EOF, &LineError{File: l.name, Line: l.line, Err: fmt.Errorf("%w (over %d bytes)", ErrLineTooLong, l.max)}
		}
		if l.line == 1 {
			chunk = trimBOM(chunk)
		}
		return chunk, l.line, err == io.EOF, nil
	}
}

// SkipRest discards the rest of an over-long line Next refused, in bounded
// memory, and reports whether the input ended before a newline (the line
// was the input's unterminated tail).
func (l *LineReader) SkipRest() (noNewline bool, err error) {
	if !l.skipping {
		return false, nil
	}
	for {
		_, err := l.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			continue
		}
		l.skipping = false
		if err == io.EOF {
			l.eof = true
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("failed to read %q: %w", l.name, err)
		}
		return false, nil
	}
}

// LineFilter hands out whole lines, newline included (the last may lack
// one), each bounded by MaxLine: a longer line is an error.
type LineFilter struct {
	lr  *LineReader
	buf []byte
}

// NewLineFilter reads lines from r.
func NewLineFilter(r io.Reader) *LineFilter { return &LineFilter{lr: NewLineReader(r, "", MaxLine)} }

// Next returns the next line; it is valid until the next call.
func (l *LineFilter) Next() ([]byte, error) {
	line, _, last, err := l.lr.Next()
	if err != nil {
		return nil, err
	}
	l.buf = append(l.buf[:0], line...)
	if !last {
		l.buf = append(l.buf, '\n')
		return l.buf, nil
	}
	return l.buf, io.EOF
}

// OpenInput opens a file the tool reads, refusing what is not a regular
// file: a FIFO would hang the read, a device (/dev/zero) never ends, a
// directory is a mistake. what names the file's role in errors ("config",
// "script"). The FIFO is opened without blocking so the refusal is prompt.
func OpenInput(path, what string) (*os.File, error) {
	return openRegular(path, what, os.O_RDONLY|nonBlock, 0)
}

// ReadInput reads a whole input file (see OpenInput) of at most max
// bytes; a larger file is an error naming it and the limit.
func ReadInput(path, what string, max int64) ([]byte, error) {
	f, err := OpenInput(path, what)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read %s %q: %w", what, path, unwrapPath(err))
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("failed to read %s %q: larger than %d bytes", what, path, max)
	}
	return data, nil
}

// openRegular opens path with flag and refuses anything but a regular file.
func openRegular(path, what string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		err = unwrapPath(err)
		if errors.Is(err, syscall.ELOOP) && flag&noFollow != 0 {
			return nil, fmt.Errorf("failed to open %s %q: is a symbolic link (give the path of the file itself)", what, path)
		}
		return nil, fmt.Errorf("failed to open %s %q: %w", what, path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("failed to open %s %q: %w", what, path, unwrapPath(err))
	}
	if st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("failed to read %s %q: is a directory", what, path)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("failed to open %s %q: %s, not a regular file", what, path, FileKind(st.Mode()))
	}
	return f, nil
}

// FileKind names what a path that is not a regular file is, for the
// errors that refuse it.
func FileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}
