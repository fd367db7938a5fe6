package seat

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzValidJSON: validJSON accepts exactly what encoding/json's Valid
// accepts.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `01`, `-`, `1.`, `1.5e`, `1.5e+3`, `1E-7`, `.5`, `+1`,
		`true`, `tru`, `nulll`, `{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":1}x`, ` {"a": [1, 2.5, "x\u00e9\n"]} `,
		"\"\x1f\"", "\"\xff\xfe\"", `"\u12g4"`, `"\/\b\f\n\r\t\"\\"`, `"\x"`, `{"a":{"b":[{"c":null}]}}`,
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
