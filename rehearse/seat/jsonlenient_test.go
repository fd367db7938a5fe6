package seat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/buger/jsonparser"
	"github.com/stretchr/testify/assert"
)

// jsonEach is encoding/json's Valid, then the top level's members as
// jsonparser hands them; invalid JSON hands out nothing, not the members
// before the fault.
func TestJSONEach(t *testing.T) {
	type member struct {
		k, v string
		t    jsonparser.ValueType
	}
	for _, tc := range []struct {
		in   string
		want []member
	}{
		{` {"a": [1, 2.5], "b\u0063":"x\"y", "d":null} `, []member{{"a", "[1, 2.5]", jsonparser.Array}, {"bc", `x\"y`, jsonparser.String}, {"d", "null", jsonparser.Null}}},
		{`[{"x":1}, "s", 2, true]`, []member{{"", `{"x":1}`, jsonparser.Object}, {"", "s", jsonparser.String}, {"", "2", jsonparser.Number}, {"", "true", jsonparser.Boolean}}},
		{`{"a":1,}`, nil},
		{`{"a":1}x`, nil},
		{"\"\x1f\"", nil},
		{`0`, nil},
		{``, nil},
		{strings.Repeat("[", 10001) + strings.Repeat("]", 10001), nil}, // past encoding/json's nesting limit
	} {
		var got []member
		valid := jsonEach([]byte(tc.in), func(k, v []byte, vt jsonparser.ValueType) { got = append(got, member{string(k), string(v), vt}) })
		assert.Equal(t, json.Valid([]byte(tc.in)), valid, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
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
