package proxy

import (
	"bytes"
	"encoding/json"
	"strings"
)

// request is what the proxy reads of a client's generation request: the
// model (for the row), whether it streams, its prompt text (for a local
// count when the answer has no usage) and max tokens (for the spend a
// first attempt reserves). The body itself is forwarded as sent.
type request struct {
	model     string
	stream    bool
	hasStream bool // the body names stream (Ollama streams unless told not to)
	usageSet  bool // stream_options is present
	prompt    string
	maxTokens int64
}

type content json.RawMessage

// text is a message content: a string, or parts whose text is gathered.
func (c content) text(b *strings.Builder) {
	raw := bytes.TrimSpace(c)
	if len(raw) == 0 {
		return
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			b.WriteString(s)
			b.WriteByte('\n')
		}
		return
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		for _, p := range parts {
			b.WriteString(p.Text)
			b.WriteByte('\n')
		}
	}
}

func (c *content) UnmarshalJSON(b []byte) error {
	*c = append((*c)[:0], b...)
	return nil
}

// parseRequest reads body; ok is false when it is not a JSON object.
func parseRequest(body []byte) (request, bool) {
	var v struct {
		Model    string          `json:"model"`
		Stream   *bool           `json:"stream"`
		StreamOp json.RawMessage `json:"stream_options"`
		Messages []struct {
			Content content `json:"content"`
		} `json:"messages"`
		System              content `json:"system"`
		Prompt              content `json:"prompt"`
		MaxTokens           int64   `json:"max_tokens"`
		MaxCompletionTokens int64   `json:"max_completion_tokens"`
		Ollama              *struct {
			NumPredict int64 `json:"num_predict"`
		} `json:"options"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return request{}, false
	}
	r := request{model: v.Model, usageSet: len(v.StreamOp) > 0 && string(v.StreamOp) != "null"}
	if v.Stream != nil {
		r.stream, r.hasStream = *v.Stream, true
	}
	var b strings.Builder
	v.System.text(&b)
	v.Prompt.text(&b)
	for _, m := range v.Messages {
		m.Content.text(&b)
	}
	r.prompt = b.String()
	r.maxTokens = max(v.MaxTokens, v.MaxCompletionTokens)
	if v.Ollama != nil {
		r.maxTokens = max(r.maxTokens, v.Ollama.NumPredict)
	}
	return r, true
}

// askUsage adds "stream_options":{"include_usage":true} to an OpenAI
// streaming body that has no stream_options: without it a stream carries
// no usage, and the row would have to count tokens locally. The client
// then sees one more chunk before [DONE], with "choices":[] and the
// usage, as the API documents for that option.
func askUsage(body []byte) []byte {
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return body
	}
	const field = `"stream_options":{"include_usage":true}`
	rest := bytes.TrimSpace(body[i+1:])
	out := make([]byte, 0, len(body)+len(field)+1)
	out = append(out, body[:i+1]...)
	out = append(out, field...)
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, body[i+1:]...)
}

// withModel replaces the body's model with model, for a fallback seat
// whose model differs from the one the client named.
func withModel(body []byte, model string) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	b, _ := json.Marshal(model)
	m["model"] = b
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}
