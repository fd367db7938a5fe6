package seat

import (
	"bytes"
	"io"
	"sync"
)

// SSEEvent is one dispatched server-sent event. Data is valid until the
// reader's next call.
type SSEEvent struct {
	Type string // the event: field; "" when the server named none
	Data []byte // data: lines joined by \n
}

// SSEReader decodes a text/event-stream body (WHATWG HTML, "server-sent
// events", interpreting an event stream) through fixed buffers: a line or
// an event's data longer than the limit yields ErrTooLong instead of
// growing memory. Comments, id: and retry: are read and dropped: a single
// attempt never reconnects.
type SSEReader struct {
	lines   *lineReader
	max     int
	typ     []byte
	data    []byte
	started bool
	over    bool // this event's data went over the limit
}

// NewSSEReader reads events from r with lines and event data bounded by
// max bytes (MaxLine when max <= 0).
func NewSSEReader(r io.Reader, max int) *SSEReader {
	if max <= 0 {
		max = MaxLine
	}
	s := sseReaders.Get().(*SSEReader)
	*s = SSEReader{lines: newLineReader(r, max), max: max, typ: s.typ[:0], data: s.data[:0]}
	return s
}

// sseReaders keeps released readers' event buffers for the next body.
var sseReaders = sync.Pool{New: func() any { return new(SSEReader) }}

// Next returns the next event with data. It returns ErrTooLong once for
// an over-long line or event (and may be called again to carry on), and
// io.EOF or the underlying read error at the end. An event left without
// its closing blank line when the stream ends cleanly is still
// dispatched: servers that omit it exist, and dropping the last event
// (often the usage) would lose more than it protects.
func (s *SSEReader) Next() (SSEEvent, error) {
	for {
		line, err := s.lines.next()
		if err == ErrTooLong {
			s.reset()
			return SSEEvent{}, ErrTooLong
		}
		if err != nil {
			if err == io.EOF && len(s.data) > 0 && !s.over {
				ev := s.event()
				s.reset()
				return ev, nil
			}
			s.reset()
			return SSEEvent{}, err
		}
		if !s.started {
			s.started = true
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // a leading BOM
		}
		if len(line) == 0 {
			if s.over {
				s.reset()
				return SSEEvent{}, ErrTooLong
			}
			if len(s.data) == 0 {
				s.reset() // nothing to dispatch (e.g. a lone event: line)
				continue
			}
			ev := s.event()
			s.reset()
			return ev, nil
		}
		if line[0] == ':' {
			continue // comment, e.g. a keep-alive
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			s.typ = append(s.typ[:0], value...)
		case "data":
			if s.over {
				continue
			}
			if len(s.data)+len(value)+1 > s.max {
				s.over, s.data = true, s.data[:0]
				continue
			}
			s.data = append(s.data, value...)
			s.data = append(s.data, '\n')
		}
	}
}

// event builds the dispatched event: the data buffer loses its final \n.
func (s *SSEReader) event() SSEEvent {
	return SSEEvent{Type: string(s.typ), Data: s.data[:len(s.data)-1]}
}

// Release hands the reader's buffers back for the next body's reader.
// Neither the reader nor an event it returned may be used afterwards.
func (s *SSEReader) Release() {
	if s.lines == nil {
		return
	}
	s.lines.release()
	s.lines = nil
	if cap(s.data) > keepLine {
		s.data = nil
	}
	if cap(s.typ) > keepLine {
		s.typ = nil
	}
	sseReaders.Put(s)
}

func (s *SSEReader) reset() {
	s.typ, s.data, s.over = s.typ[:0], s.data[:0], false
}
