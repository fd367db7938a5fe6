package proxy

import (
	"bytes"
	"encoding/json"
)

// A stream goes to the client event by event (modeStream): its bytes
// are framed as the client's SSE or NDJSON reader frames them, so that
// an event is forwarded whole or not at all, and one whose data no JSON
// reader can parse is dropped. Gateways differ here: Envoy forwards
// bytes and leaves the client's reader to fail on such an event (the
// official SDKs end the stream with a JSON error, a whole answer lost
// for one bad event), LiteLLM's Responses path skips a chunk it cannot
// parse. The proxy drops it and says so on the row's note: the event
// carries nothing a client could read, and the seat's own reader
// tolerates it the same way.

// eventEnd is the length of the first whole event in b, its closing
// blank line included (SSE: lines end in \n, \r\n or a lone \r; an empty
// line ends the event), or of the first line (NDJSON); -1 when b holds
// none yet.
func eventEnd(b []byte, ndjson bool) int {
	if ndjson {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			return i + 1
		}
		return -1
	}
	for i := 0; i < len(b); {
		j := i + lineEnd(b[i:])
		if j < i {
			return -1 // the line is not whole yet
		}
		end := j + 1
		if b[j] == '\r' {
			if end == len(b) {
				return -1 // a \n may follow in the next read
			}
			if b[end] == '\n' {
				end++
			}
		}
		if j == i {
			return end // an empty line: the event's end
		}
		i = end
	}
	return -1
}

// lineEnd is the index of the first \r or \n in b, or -1.
func lineEnd(b []byte) int { return bytes.IndexAny(b, "\r\n") }

// malformedEvent reports whether ev (one event, as eventEnd frames it)
// carries data that is not JSON: an NDJSON line, or an SSE event's data
// lines joined by \n, other than the [DONE] sentinel. An event without
// data (a comment, a keep-alive) is not malformed.
func malformedEvent(ev []byte, ndjson bool) bool {
	if ndjson {
		t := bytes.TrimSpace(ev)
		return len(t) > 0 && !json.Valid(t)
	}
	var data []byte
	lines := 0
	for rest := ev; len(rest) > 0; {
		i := lineEnd(rest)
		line := rest
		if i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v, _ = bytes.CutPrefix(v, []byte(" "))
		switch lines++; lines {
		case 1:
			data = v
		case 2:
			data = append(append(bytes.Clone(data), '\n'), v...)
		default:
			data = append(append(data, '\n'), v...)
		}
	}
	d := bytes.TrimSpace(data)
	return len(d) > 0 && !bytes.Equal(d, []byte("[DONE]")) && !json.Valid(d)
}
