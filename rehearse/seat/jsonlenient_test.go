package seat

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The reference decoders' lenient fields, read as the targeted readers
// read theirs (textOf, TokenCount).

// jsonText is a text field read leniently: a string, or an array of
// parts whose "text" members are joined (some compatible servers send
// content that way); null or any other shape is empty, never an error
// that would drop the whole event.
type jsonText string

func (t *jsonText) UnmarshalJSON(b []byte) error {
	*t = ""
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	switch b[0] {
	case '"':
		var s string
		if json.Unmarshal(b, &s) == nil {
			*t = jsonText(s)
		}
	case '[':
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(b, &parts) == nil {
			var all []byte
			for _, p := range parts {
				all = append(all, p.Text...)
			}
			*t = jsonText(all)
		}
	}
	return nil
}

// jsonCount is a token count read leniently: any JSON number, clamped into
// [0, admit.MaxTokens] (9e18, -3, 2.5 and 1e400 are all counts a broken
// server has sent); anything else is absent.
type jsonCount struct {
	n  int64
	ok bool
}

func (i *jsonCount) UnmarshalJSON(b []byte) error {
	n, ok := TokenCount(b)
	*i = jsonCount{n: n, ok: ok}
	return nil
}

// present reports a count the answer actually gave.
func (i *jsonCount) present() bool { return i != nil && i.ok }

func (i *jsonCount) value() int64 {
	if i == nil {
		return 0
	}
	return i.n
}

// A chunk that is not valid JSON is a malformed event, and none of its
// text reaches the answer.
func TestChunkInvalidJSONTakesNoText(t *testing.T) {
	st := &stream{onContent: func() {}}
	openaiWire{}.chunk([]byte(`{"choices":[{"delta":{"content":"hi"}}],}`), st)
	assert.Equal(t, 1, st.bad)
	assert.False(t, st.content)
}

// BenchmarkChunk is the per-event work json.Valid now does inside the
// timed window: one OpenAI chunk read for its fields. BenchmarkReadStream
// (a whole answer) and rehearse's BenchmarkRealLoop64 are the
// user-visible figures to compare across the change.
func BenchmarkChunk(b *testing.B) {
	chunk := []byte(`{"choices":[{"delta":{"content":" the and of to in a is that for it"},"finish_reason":null,"index":0,"logprobs":null}],"created":1796080514,"id":"chatcmpl-retrygate0","model":"gpt-4o-mini","object":"chat.completion.chunk","system_fingerprint":"fp_retrygate","usage":null}`)
	st := &stream{onContent: func() {}}
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		openaiWire{}.chunk(chunk, st)
	}
	if st.bad != 0 {
		b.Fatal("a valid chunk read as malformed")
	}
}
