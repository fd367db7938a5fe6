package proxy

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       request
		ok         bool
	}{
		{"openai", `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":300,
			"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a \"quoted\" \u00e9"},{"type":"image_url","image_url":{}}]}]}`,
			request{model: "gpt-4o", stream: true, hasStream: true, usageSet: true, maxTokens: 300, prompt: "be brief\na \"quoted\" é\n\n"}, true},
		{"anthropic: system before messages whatever the key order", `{"messages":[{"role":"user","content":"hi"}],"system":"sys","max_tokens":64}`,
			request{maxTokens: 64, prompt: "sys\nhi\n"}, true},
		{"ollama", `{"model":"llama3","stream":false,"options":{"num_predict":128},"prompt":"why"}`,
			request{model: "llama3", hasStream: true, maxTokens: 128, prompt: "why\n"}, true},
		{"null stream_options, odd counts", `{"stream_options":null,"max_tokens":-5,"max_completion_tokens":1e300,"model":7}`,
			request{maxTokens: admit.MaxTokens}, true},
		{"responses: instructions first, input items in order", `{"model":"gpt-5","input":[{"role":"user","content":"hi"},{"type":"message","role":"user","content":[{"type":"input_text","text":"there"}]},{"type":"function_call_output","call_id":"c","output":"{}"}],"instructions":"be brief","stream":true,"max_output_tokens":256}`,
			request{model: "gpt-5", stream: true, hasStream: true, maxTokens: 256, prompt: "be brief\nhi\nthere\n"}, true},
		{"responses: input as a string", `{"model":"gpt-5","input":"why"}`, request{model: "gpt-5", prompt: "why\n"}, true},
		{"not an object", `[1,2]`, request{}, false},
		{"broken", `{"model":"m",`, request{}, false},
		{"empty", ``, request{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseRequest([]byte(tc.body))
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

// refRequest is what parseRequest must read from a body encoding/json
// accepts, decoded the slow, general way.
func refRequest(t *testing.T, body []byte) request {
	var v map[string]any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	require.NoError(t, d.Decode(&v))
	var r request
	r.model, _ = v["model"].(string)
	if s, ok := v["stream"].(bool); ok {
		r.stream, r.hasStream = s, true
	}
	if so, ok := v["stream_options"]; ok && so != nil {
		r.usageSet = true
	}
	count := func(x any) int64 {
		n, ok := x.(json.Number)
		if !ok {
			return 0
		}
		if i, err := n.Int64(); err == nil {
			return admit.ClampTokens(i)
		}
		f, _ := n.Float64()
		return admit.ClampTokensFloat(f)
	}
	var np int64
	if o, ok := v["options"].(map[string]any); ok {
		np = count(o["num_predict"])
	}
	r.maxTokens = max(count(v["max_tokens"]), count(v["max_completion_tokens"]), count(v["max_output_tokens"]), np)
	var b strings.Builder
	text := func(c any) {
		switch c := c.(type) {
		case string:
			b.WriteString(c + "\n")
		case []any:
			for _, p := range c {
				if p, ok := p.(map[string]any); ok {
					s, _ := p["text"].(string)
					b.WriteString(s + "\n")
				}
			}
		}
	}
	text(v["system"])
	text(v["instructions"])
	text(v["prompt"])
	contents := func(items any) {
		if ms, ok := items.([]any); ok {
			for _, m := range ms {
				if m, ok := m.(map[string]any); ok {
					text(m["content"])
				}
			}
		}
	}
	contents(v["messages"])
	if in, ok := v["input"].(string); ok {
		text(in)
	}
	contents(v["input"])
	r.prompt = b.String()
	return r
}

// FuzzParseRequest: no body panics, and on any JSON object encoding/json
// reads (with unique keys) parseRequest reads the same fields.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi \n \"x\""}]}`,
		`{"system":[{"type":"text","text":"s"}],"messages":[{"content":[{"text":"a"},{"text":1},"x"]}],"max_tokens":5.5}`,
		`{"prompt":"p","options":{"num_predict":9007199254740993},"stream_options":{}}`,
		`{"model":"\ud83d\ude00","max_completion_tokens":-1}`,
		`{"instructions":"i","input":[{"content":"a"},{"content":[{"type":"input_text","text":"b"}]}],"max_output_tokens":7}`,
		`{"input":"s","max_output_tokens":1e9}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := parseRequest(body)
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) != nil || top == nil || dupKeys(body) {
			return
		}
		require.True(t, ok, "a JSON object is read")
		assert.Equal(t, refRequest(t, body), got)
	})
}

// dupKeys reports whether any object in body repeats a key (encoding/json
// keeps the last; which one a reader keeps is not the point here).
func dupKeys(body []byte) bool {
	d := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		obj  bool
		keys map[string]bool
		key  bool // the next string token is a key
	}
	var st []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(st) > 0 {
			top = st[len(st)-1]
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{':
				if top != nil && top.obj {
					top.key = true
				}
				st = append(st, &frame{obj: true, keys: map[string]bool{}, key: true})
			case '[':
				if top != nil && top.obj {
					top.key = true
				}
				st = append(st, &frame{})
			default:
				st = st[:len(st)-1]
			}
		case string:
			if top != nil && top.obj && top.key {
				if top.keys[tok] {
					return true
				}
				top.keys[tok], top.key = true, false
				continue
			}
			if top != nil && top.obj {
				top.key = true
			}
		default:
			if top != nil && top.obj {
				top.key = true
			}
		}
	}
}

func BenchmarkParseRequest(b *testing.B) {
	msg := `{"role":"user","content":"` + strings.Repeat(`lorem ipsum dolor sit amet, \"quoted\" `, 50) + `"}`
	body := []byte(`{"model":"gpt-4o-mini","stream":true,"max_tokens":512,"messages":[` + strings.Repeat(msg+",", 19) + msg + `]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		parseRequest(body)
	}
}

func TestReadBody(t *testing.T) {
	body := strings.Repeat("x", 5000)
	for _, declared := range []int64{5000, 0, -1, 100, 1 << 20} {
		got, err := readBody(strings.NewReader(body), declared, 1<<16)
		require.NoError(t, err)
		assert.Equal(t, body, string(got), "declared %d", declared)
	}
}
