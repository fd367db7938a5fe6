package seat

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
)

// MaxLine bounds one SSE or NDJSON line (and one SSE event's data): no
// model stream sends a single line anywhere near this, so a longer one is
// a broken or hostile server, and reading it whole would grow memory.
const MaxLine = 1 << 20

// ErrTooLong is returned once for a line (or an SSE event's data) longer
// than the reader's limit. The reader skips the rest of that line on the
// next call, through its fixed buffer, so the caller may carry on or stop.
var ErrTooLong = errors.New("line over the length limit")

// lineReader splits a stream into lines ended by \n, \r\n or a lone \r
// (the SSE rule; harmless for NDJSON, whose JSON never holds a raw CR).
// Memory is the bufio buffer plus at most max bytes of line.
type lineReader struct {
	br       *bufio.Reader
	max      int
	line     []byte
	skipLF   bool // the last line ended in \r: a following \n belongs to it
	skipping bool // inside an over-long line: discard through its end
}

// lineReaders keeps the readers of finished answers, buffers and all:
// every attempt reads one body, and a fresh buffer per attempt was most
// of what an attempt allocated. The buffer is net/http's own size: the
// body under it is read from the connection's 4 KiB buffer, and a pool
// refills after every GC cycle, so a bigger one only costs memory.
var lineReaders = sync.Pool{New: func() any { return &lineReader{br: bufio.NewReaderSize(nil, 4<<10)} }}

// keepLine is the largest line buffer a released reader keeps: one
// over-long line must not pin its memory in the pool.
const keepLine = 64 << 10

func newLineReader(r io.Reader, max int) *lineReader {
	if max <= 0 {
		max = MaxLine
	}
	l := lineReaders.Get().(*lineReader)
	l.br.Reset(r)
	l.max, l.line, l.skipLF, l.skipping = max, l.line[:0], false, false
	return l
}

// release returns the reader to the pool; neither it nor a line it
// returned may be used afterwards.
func (l *lineReader) release() {
	l.br.Reset(nil)
	if cap(l.line) > keepLine {
		l.line = nil
	}
	lineReaders.Put(l)
}

// next returns the next line without its terminator; the slice is valid
// until the following call. A final line without a terminator is
// returned before io.EOF.
func (l *lineReader) next() ([]byte, error) {
	l.line = l.line[:0]
	for {
		if l.br.Buffered() == 0 {
			if _, err := l.br.Peek(1); err != nil {
				if err == io.EOF && len(l.line) > 0 && !l.skipping {
					return l.line, nil
				}
				if err == io.EOF {
					l.skipping = false
				}
				return nil, err
			}
		}
		buf, _ := l.br.Peek(l.br.Buffered())
		if l.skipLF {
			l.skipLF = false
			if buf[0] == '\n' {
				l.br.Discard(1)
				continue
			}
		}
		i := lineEnd(buf)
		end := len(buf)
		if i >= 0 {
			end = i
		}
		if !l.skipping {
			if len(l.line)+end > l.max {
				// Report once; the rest of the line is discarded later.
				l.skipping = true
				l.br.Discard(end)
				if i >= 0 {
					l.skipping = false
					l.skipLF = buf[i] == '\r'
					l.br.Discard(1)
				}
				l.line = l.line[:0]
				return nil, ErrTooLong
			}
			l.line = append(l.line, buf[:end]...)
		}
		l.br.Discard(end)
		if i < 0 {
			continue
		}
		l.skipLF = buf[i] == '\r'
		l.br.Discard(1)
		if l.skipping {
			l.skipping = false
			continue
		}
		return l.line, nil
	}
}

// lineEnd is bytes.IndexAny(buf, "\r\n"), as two byte searches: a
// stream's lines end in \n, and the \r search stops there.
func lineEnd(buf []byte) int {
	n := bytes.IndexByte(buf, '\n')
	head := buf
	if n >= 0 {
		head = buf[:n]
	}
	if r := bytes.IndexByte(head, '\r'); r >= 0 {
		return r
	}
	return n
}
