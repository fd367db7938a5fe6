package seat

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/buger/jsonparser"
)

// FuzzValidJSON: validJSON and jsonEach accept exactly what
// encoding/json's Valid accepts, and jsonEach hands out what jsonparser
// would.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `01`, `-`, `1.`, `1.5e`, `1.5e+3`, `1E-7`, `.5`, `+1`,
		`true`, `tru`, `nulll`, `{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":1}x`, ` {"a": [1, 2.5, "x\u00e9\n"]} `,
		"\"\x1f\"", "\"\xff\xfe\"", `"\u12g4"`, `"\/\b\f\n\r\t\"\\"`, `"\x"`, `{"a":{"b":[{"c":null}]}}`,
		`{"a\u0062":1,"c":"d\"e","f":[true,false,null,-1.5e3,{}],"\ud800":2,"g":3}`, `[{"x":1}, "s", 2, null]`,
		oaText("hello"), oaUsage(12, 40), `{"choices":[{"delta":{"content":"hi"}}]}` + "\n",
		strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth),
		strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1),
		strings.Repeat(`{"a":`, maxJSONDepth) + "1" + strings.Repeat("}", maxJSONDepth),
		strings.Repeat(`{"a":`, maxJSONDepth+1) + "1" + strings.Repeat("}", maxJSONDepth+1),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
		// jsonEach validates the same, and hands out the members (or
		// elements) of valid JSON as jsonparser's ObjectEach (ArrayEach).
		type member struct {
			k, v string
			t    jsonparser.ValueType
		}
		var got, want []member
		valid := jsonEach(b, func(k, v []byte, t jsonparser.ValueType) { got = append(got, member{string(k), string(v), t}) })
		if valid != json.Valid(b) {
			t.Fatalf("jsonEach(%q) = %v, json.Valid says %v", b, valid, !valid)
		}
		if !valid {
			return
		}
		switch tb := bytes.TrimSpace(b); tb[0] {
		case '{':
			_ = jsonparser.ObjectEach(tb, func(k, v []byte, t jsonparser.ValueType, _ int) error {
				want = append(want, member{string(k), string(v), t})
				return nil
			})
		case '[':
			_, _ = jsonparser.ArrayEach(tb, func(v []byte, t jsonparser.ValueType, _ int, _ error) {
				want = append(want, member{"", string(v), t})
			})
		}
		if !slices.Equal(got, want) {
			t.Fatalf("jsonEach(%q) handed out %+v, jsonparser %+v", b, got, want)
		}
	})
}

func BenchmarkValidJSON(b *testing.B) {
	chunk := []byte(`{"choices":[{"delta":{"content":" the and of to in a is that for it"},"finish_reason":null,"index":0,"logprobs":null}],"created":1796080514,"id":"chatcmpl-retrygate0","model":"gpt-4o-mini","object":"chat.completion.chunk","system_fingerprint":"fp_retrygate","usage":null}`)
	b.Run("validJSON", func(b *testing.B) {
		for b.Loop() {
			validJSON(chunk)
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		for b.Loop() {
			json.Valid(chunk)
		}
	})
}
