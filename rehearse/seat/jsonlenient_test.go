package seat

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

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
