package proxy

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/buger/jsonparser"

	"github.com/retrygate/retrygate/rehearse/seat"
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
	responses bool // a Responses API request (POST {base}/responses)
	prompt    string
	maxTokens int64
}

// parseRequest reads body; ok is false when it is not a JSON object.
// It runs once a request, on bodies that carry a whole conversation, so
// it reads only the fields it uses, in place (jsonparser), and skips the
// rest without decoding it. Measured against encoding/json (one decode
// into map[string]any, the general way) through the proxy at c=64,
// 8 pairs, benchstat (BenchmarkAddedLatency/upstream=0/c=64,chat=40KB): with a 40 KB chat encoding/json cost +39% CPU a
// request (424 → 589 µs, p=0.005); with a short chat no difference could
// be told (p=0.2): the fast path stays for long chats. A body whose
// top-level object does not parse gets the 400; a fault deeper inside is
// the provider's to answer.
func parseRequest(body []byte) (request, bool) {
	data := bytes.TrimSpace(body)
	if len(data) == 0 || data[0] != '{' {
		return request{}, false
	}
	var r request
	var b strings.Builder
	var msgs, input []byte
	inputT := jsonparser.NotExist
	var maxTokens, maxCompletion, maxOutput, numPredict int64
	err := jsonparser.ObjectEach(data, func(k, v []byte, t jsonparser.ValueType, _ int) error {
		switch string(k) {
		case "model":
			if t == jsonparser.String {
				r.model = unquote(v)
			}
		case "stream":
			if t == jsonparser.Boolean {
				r.stream, r.hasStream = v[0] == 't', true
			}
		case "stream_options":
			r.usageSet = t != jsonparser.Null
		case "messages":
			if t == jsonparser.Array {
				msgs = v
			}
		case "input": // the Responses API's: a string, or input items
			input, inputT = v, t
		case "system", "instructions":
			text(v, t, &b)
		case "prompt":
			text(v, t, &b)
		case "max_tokens":
			maxTokens = number(v, t)
		case "max_completion_tokens":
			maxCompletion = number(v, t)
		case "max_output_tokens":
			maxOutput = number(v, t)
		case "options":
			if t == jsonparser.Object {
				if n, nt, _, err := jsonparser.Get(v, "num_predict"); err == nil {
					numPredict = number(n, nt)
				}
			}
		}
		return nil
	})
	if err != nil {
		return request{}, false
	}
	// The system prompt (instructions) first, then the messages (input
	// items, or input as one string) in order, as the local count has
	// always read them.
	contents := func(items []byte) {
		_, _ = jsonparser.ArrayEach(items, func(m []byte, t jsonparser.ValueType, _ int, _ error) {
			if t != jsonparser.Object {
				return
			}
			if c, ct, _, err := jsonparser.Get(m, "content"); err == nil {
				text(c, ct, &b)
			}
		})
	}
	if msgs != nil {
		contents(msgs)
	}
	switch inputT {
	case jsonparser.String:
		text(input, inputT, &b)
	case jsonparser.Array:
		contents(input)
	}
	r.prompt = b.String()
	r.maxTokens = max(maxTokens, maxCompletion, maxOutput, numPredict)
	return r, true
}

// text gathers a message content: a string, or parts whose text is
// gathered; each piece ends in a newline.
func text(v []byte, t jsonparser.ValueType, b *strings.Builder) {
	switch t {
	case jsonparser.String:
		b.WriteString(unquote(v))
		b.WriteByte('\n')
	case jsonparser.Array:
		_, _ = jsonparser.ArrayEach(v, func(p []byte, pt jsonparser.ValueType, _ int, _ error) {
			if pt != jsonparser.Object {
				return
			}
			if tv, tt, _, err := jsonparser.Get(p, "text"); err == nil && tt == jsonparser.String {
				b.WriteString(unquote(tv))
			}
			b.WriteByte('\n')
		})
	}
}

// unquote is a JSON string's value (v without its quotes, as jsonparser
// gives it).
func unquote(v []byte) string {
	valid := utf8.Valid(v)
	if valid && bytes.IndexByte(v, '\\') < 0 {
		return string(v)
	}
	if valid && !bytes.Contains(v, []byte(`\u`)) {
		if s, err := jsonparser.ParseString(v); err == nil {
			return s
		}
	}
	// \u escapes and bytes that are not UTF-8 are read by encoding/json,
	// as a provider's decoder would: jsonparser pairs surrogates that are
	// not pairs and refuses a lone one, which encoding/json reads as
	// U+FFFD, as it does a stray byte.
	q := make([]byte, 0, len(v)+2)
	q = append(append(append(q, '"'), v...), '"')
	var s string
	if json.Unmarshal(q, &s) != nil {
		return ""
	}
	return s
}

// number is a count, as every reader of a count in a body reads one
// (seat.TokenCount); anything but a JSON number is 0.
func number(v []byte, t jsonparser.ValueType) int64 {
	if t != jsonparser.Number {
		return 0
	}
	n, _ := seat.TokenCount(v)
	return n
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
