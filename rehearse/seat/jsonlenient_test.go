package seat

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/buger/jsonparser"
	"github.com/stretchr/testify/assert"

	"retrygate/admit"
)

// The reference decoders' lenient fields, as the targeted readers read
// them (textOf, countOf).

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

// jsonInt is a token count read leniently: any JSON number, clamped into
// [0, admit.MaxTokens] (9e18, -3, 2.5 and 1e400 are all counts a broken
// server has sent); anything else is absent.
type jsonInt struct {
	n  int64
	ok bool
}

func (i *jsonInt) UnmarshalJSON(b []byte) error {
	*i = jsonInt{}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || !(b[0] == '-' || b[0] >= '0' && b[0] <= '9') {
		return nil
	}
	// ParseFloat gives ±Inf with a range error past float64: clamped too.
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !math.IsInf(f, 0) {
		return nil
	}
	*i = jsonInt{n: admit.ClampTokensFloat(f), ok: true}
	return nil
}

// present reports a count the answer actually gave.
func (i *jsonInt) present() bool { return i != nil && i.ok }

func (i *jsonInt) value() int64 {
	if i == nil {
		return 0
	}
	return i.n
}

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
