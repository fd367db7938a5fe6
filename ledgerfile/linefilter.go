package ledgerfile

import (
	"bufio"
	"io"
)

// LineFilter hands out whole lines, newline included (the last may lack one).
type LineFilter struct {
	br  *bufio.Reader
	buf []byte
}

// NewLineFilter reads lines from r.
func NewLineFilter(r io.Reader) *LineFilter { return &LineFilter{br: bufio.NewReaderSize(r, 64<<10)} }

// Next returns the next line; it is valid until the next call.
func (l *LineFilter) Next() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		chunk, err := l.br.ReadSlice('\n')
		l.buf = append(l.buf, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		return l.buf, err
	}
}
