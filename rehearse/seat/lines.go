package seat

import (
	"bufio"
	"bytes"
	"io"
	"sync"
)

// MaxLine bounds one SSE or NDJSON line (and one SSE event's data): no
// model stream sends a single line anywhere near this, so a longer one is
// a broken or hostile server, and reading it whole would grow memory.
// It ends the read with bufio.ErrTooLong.
const MaxLine = 1 << 20

// bodyReader reads a streamed answer as SSE events (WHATWG HTML,
// "server-sent events", interpreting an event stream) or as NDJSON lines
// (Ollama's application/x-ndjson), through a bufio.Scanner bounded by
// the line limit. It does not decode the JSON: a malformed line is the
// caller's to tolerate or classify.
type bodyReader struct {
	sc    bufio.Scanner
	split bufio.SplitFunc // b.lines, made once per pooled reader
	r     io.Reader
	err   error // r's last error: a last line counts only after a clean io.EOF
	cr    bool  // the last line ended in \r: a following \n belongs to it
	max   int
	// over is set when an SSE event's data went over max.
	over    bool
	started bool
	typ     []byte // the SSE event being read
	data    []byte
	buf     [4 << 10]byte // the scanner's first buffer: net/http's own size
}

// bodyReaders keeps the readers of finished answers, buffers and all:
// every attempt reads one body, and fresh buffers per attempt were most
// of what an attempt allocated.
var bodyReaders = sync.Pool{New: func() any {
	b := new(bodyReader)
	b.split = b.lines
	return b
}}

// keepLine is the largest event buffer a released reader keeps: one
// over-long event must not pin its memory in the pool.
const keepLine = 64 << 10

// newBodyReader reads r with lines and event data bounded by max bytes.
func newBodyReader(r io.Reader, max int) *bodyReader {
	b := bodyReaders.Get().(*bodyReader)
	b.r, b.err, b.cr, b.max, b.over, b.started = r, nil, false, max, false, false
	b.typ, b.data = b.typ[:0], b.data[:0]
	b.sc = *bufio.NewScanner(b)
	n := min(len(b.buf), max+1) // the line and its terminator
	b.sc.Buffer(b.buf[:n:n], max+1)
	b.sc.Split(b.split)
	return b
}

// release hands the reader back for the next body's; neither it nor a
// line or event it returned may be used afterwards.
func (b *bodyReader) release() {
	b.sc, b.r = bufio.Scanner{}, nil // and a buffer grown past buf
	if cap(b.data) > keepLine {
		b.data = nil
	}
	if cap(b.typ) > keepLine {
		b.typ = nil
	}
	bodyReaders.Put(b)
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.err = err
	return n, err
}

// lines splits at \n, \r\n or a lone \r (the SSE rule; harmless for
// NDJSON, whose JSON never holds a raw CR). A final line without a
// terminator is a line when the body ended cleanly, not when it broke off.
func (b *bodyReader) lines(data []byte, atEOF bool) (int, []byte, error) {
	skip := 0
	if b.cr && len(data) > 0 {
		b.cr = false
		if data[0] == '\n' {
			skip = 1
		}
	}
	if i := lineEnd(data[skip:]); i >= 0 {
		b.cr = data[skip+i] == '\r'
		return skip + i + 1, data[skip : skip+i], nil
	}
	if atEOF && b.err == io.EOF && len(data) > skip {
		return len(data), data[skip:], nil
	}
	return skip, nil, nil
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

// Err is why the reading ended: nil at a clean end, bufio.ErrTooLong for
// an over-long line or event, else the body's read error.
func (b *bodyReader) Err() error {
	if b.over {
		return bufio.ErrTooLong
	}
	return b.sc.Err()
}

// line returns the next non-blank NDJSON line, trimmed of surrounding
// whitespace, valid until the next call; false at the end (see Err).
func (b *bodyReader) line() ([]byte, bool) {
	for b.sc.Scan() {
		if line := bytes.TrimSpace(b.sc.Bytes()); len(line) > 0 {
			return line, true
		}
	}
	return nil, false
}

// event returns the next SSE event with data: its event: field ("" when
// the server named none) and its data: lines joined by \n, valid until
// the next call; false at the end (see Err). Comments, id: and retry:
// are dropped: a single attempt never reconnects. An event left without
// its closing blank line when the stream ends cleanly is still
// dispatched: servers that omit it exist, and dropping the last event
// (often the usage) would lose more than it protects.
func (b *bodyReader) event() (typ string, data []byte, ok bool) {
	b.typ, b.data = b.typ[:0], b.data[:0]
	for b.sc.Scan() {
		line := b.sc.Bytes()
		if !b.started {
			b.started = true
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // a leading BOM
		}
		if len(line) == 0 {
			if len(b.data) > 0 {
				return string(b.typ), b.data[:len(b.data)-1], true
			}
			b.typ = b.typ[:0] // nothing to dispatch (e.g. a lone event: line)
			continue
		}
		if line[0] == ':' {
			continue // comment, e.g. a keep-alive
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			b.typ = append(b.typ[:0], value...)
		case "data":
			if len(b.data)+len(value)+1 > b.max {
				b.over = true
				return "", nil, false
			}
			b.data = append(append(b.data, value...), '\n')
		}
	}
	if len(b.data) > 0 && b.sc.Err() == nil {
		return string(b.typ), b.data[:len(b.data)-1], true
	}
	return "", nil, false
}
