package proxy

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// frame is a stream's bytes as the exchange frames them, fed in reads
// of the given sizes: its events, the last one what is left at the end.
func frame(b []byte, sizes []int, ndjson bool) [][]byte {
	var evs [][]byte
	var pend []byte
	for len(b) > 0 {
		n := len(b)
		if len(sizes) > 0 {
			n = max(1, min(sizes[0], len(b)))
			sizes = sizes[1:]
		}
		pend = append(pend, b[:n]...)
		b = b[n:]
		for {
			e := eventEnd(pend, ndjson)
			if e < 0 {
				break
			}
			evs = append(evs, bytes.Clone(pend[:e]))
			pend = pend[e:]
		}
	}
	if len(pend) > 0 {
		evs = append(evs, pend)
	}
	return evs
}

func TestStreamFraming(t *testing.T) {
	in := "data: {\"a\":1}\n\n: keep-alive\r\n\r\nevent: x\rdata: {\"b\"\rdata: :2}\r\rdata: [DONE]\n\ndata: {\"trunc\n\n"
	evs := frame([]byte(in), []int{3, 7, 1, 1, 40}, false)
	require.Len(t, evs, 5)
	assert.Equal(t, "data: {\"a\":1}\n\n", string(evs[0]))
	assert.Equal(t, []bool{false, false, false, false, true}, []bool{
		malformedEvent(evs[0], false), malformedEvent(evs[1], false), malformedEvent(evs[2], false),
		malformedEvent(evs[3], false), malformedEvent(evs[4], false)}, "only the event no JSON reader parses")
	nd := frame([]byte("{\"a\":1}\n{\"b\":\n\n{\"c\":3}"), nil, true)
	require.Len(t, nd, 4)
	assert.True(t, malformedEvent(nd[1], true))
	assert.False(t, malformedEvent(nd[2], true), "a blank line is no event")
}

// FuzzStreamFraming: whatever an upstream sends, in whatever reads, the
// events framed put back together are its bytes, in order (nothing lost,
// nothing made up), each but the last ends where the client's reader
// would end it, and judging them never panics.
func FuzzStreamFraming(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"), []byte{3, 1, 9}, false)
	f.Add([]byte("event: e\r\ndata: x\r\n\r\n\r"), []byte{1}, false)
	f.Add([]byte("{\"a\":1}\n{\n"), []byte{2, 2}, true)
	f.Fuzz(func(t *testing.T, b, cuts []byte, ndjson bool) {
		sizes := make([]int, len(cuts))
		for i, c := range cuts {
			sizes[i] = int(c)
		}
		evs := frame(b, sizes, ndjson)
		assert.Equal(t, b, bytes.Join(evs, nil))
		for i, ev := range evs {
			_ = malformedEvent(ev, ndjson)
			if i < len(evs)-1 {
				// One whole event (alone, one ending in a lone \r may yet
				// be followed by a \n: its reader waits to see).
				e := eventEnd(ev, ndjson)
				assert.True(t, e == len(ev) || e == -1 && ev[len(ev)-1] == '\r', "event %d is one whole event: %q", i, ev)
			}
		}
	})
}
