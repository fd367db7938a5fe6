package seat

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/buger/jsonparser"
)

// anthropicWire speaks the Messages API: POST {base_url}/messages with
// stream: true, reading message_start … content_block_delta … message_delta
// … message_stop, with ping and error events anywhere.
type anthropicWire struct{}

// anthropicDefaultMax fills max_tokens, which the Messages API requires,
// when the attempt sets none.
const anthropicDefaultMax = 1024

type anthropicRequest struct {
	Model     string    `json:"model"`
	MaxTokens int       `json:"max_tokens"`
	System    string    `json:"system,omitempty"`
	Messages  []Message `json:"messages"`
	Stream    bool      `json:"stream"`
}

func (anthropicWire) path() string { return "/messages" }
func (anthropicWire) ndjson() bool { return false }

func (anthropicWire) header(h http.Header, key string) {
	h.Set("Accept", "text/event-stream")
	h.Set("Anthropic-Version", "2023-06-01")
	SetAuth(h, "anthropic", key)
}

func (anthropicWire) body(model string, req Request) []byte {
	r := anthropicRequest{
		Model:     model,
		MaxTokens: req.MaxTokens,
		Stream:    true,
	}
	// Anthropic takes the system prompt as a field, not a message.
	var system []string
	for _, m := range req.chat() {
		if m.Role == "system" {
			system = append(system, m.Content)
			continue
		}
		r.Messages = append(r.Messages, m)
	}
	r.System = strings.Join(system, "\n\n")
	if r.MaxTokens <= 0 {
		r.MaxTokens = anthropicDefaultMax
	}
	b, _ := json.Marshal(r)
	return b
}

// event reads one event by targeted field extraction (see
// openaiWire.chunk).
func (anthropicWire) event(typ string, data []byte, st *stream) {
	obj, ok := jsonObject(data, st)
	if !ok {
		return
	}
	et := typ // the data's type names the event; the SSE name is a fallback
	if v, present, wrong := member(obj, jsonparser.String, "type"); wrong {
		st.bad++
		return
	} else if present && len(v) > 0 {
		et = string(v)
	}
	// The members each event type reads must have their shapes, as
	// encoding/json would insist for every member.
	msg, _, w1 := member(obj, jsonparser.Object, "message")
	block, _, w2 := member(obj, jsonparser.Object, "content_block")
	delta, _, w3 := member(obj, jsonparser.Object, "delta")
	usage, hasUsage, w4 := member(obj, jsonparser.Object, "usage")
	if w1 || w2 || w3 || w4 {
		st.bad++
		return
	}
	switch et {
	case "message_start":
		if u, ok, _ := member(msg, jsonparser.Object, "usage"); ok {
			anthropicInput(u, st)
			// Its output_tokens is a provisional count; message_delta
			// carries the total.
		}
	case "content_block_start":
		textsAt(block, st, "text", "thinking")
	case "content_block_delta":
		dt, _, _ := member(delta, jsonparser.String, "type")
		field := ""
		switch string(dt) {
		case "text_delta":
			field = "text"
		case "thinking_delta":
			field = "thinking"
		case "input_json_delta":
			field = "partial_json"
		}
		if field != "" {
			textsAt(delta, st, field)
		}
	case "message_delta":
		if hasUsage {
			anthropicTotals(usage, st) // cumulative, and maybe partial: merged by field
		}
		if r, ok := stringMember(delta, "stop_reason"); ok && r != "" {
			st.finished = true // the answer says it ended; message_stop follows
		}
	case "message_stop":
		st.done = true
	case "error":
		st.fail(errorCode(obj))
	}
	// ping and event types added later are ignored, as the API asks.
}

// anthropicTotals reads a usage object's final counts: message_delta's
// (a running total) or a whole answer's.
func anthropicTotals(u []byte, st *stream) {
	if n, ok := countOf(u, "output_tokens"); ok {
		st.usage.set(uCompletion, n)
	}
	anthropicInput(u, st)
}

// anthropicInput takes a usage object's input counts: fresh
// (input_tokens), cache writes and cache reads. The cache fields sit
// beside input_tokens (docs/log.md), so the prompt is their sum
// (usage.prompt), and each is also kept as its part:
// cache_read_input_tokens as cached_tokens, cache_creation_input_tokens
// as cache_write_tokens.
func anthropicInput(u []byte, st *stream) {
	st.usage.beside = true
	for _, f := range [...]struct {
		key string
		to  usageField
	}{{"input_tokens", uInput}, {"cache_creation_input_tokens", uCacheWrite}, {"cache_read_input_tokens", uCached}} {
		if v, ok := countOf(u, f.key); ok {
			st.usage.set(f.to, v)
		}
	}
}

// whole reads a non-streamed answer, a Message, as event reads its
// members: a wrong shape of type, content or usage is malformed.
func (anthropicWire) whole(data []byte, st *stream) {
	obj, ok := jsonObject(data, st)
	if !ok {
		return
	}
	typ, _, w1 := member(obj, jsonparser.String, "type")
	content, _, w2 := member(obj, jsonparser.Array, "content")
	usage, hasUsage, w3 := member(obj, jsonparser.Object, "usage")
	if w1 || w2 || w3 {
		st.bad++
		return
	}
	if string(typ) == "error" {
		st.fail(errorCode(obj))
		return
	}
	// Every block must be an object before any of their text counts.
	bad := false
	_, _ = jsonparser.ArrayEach(content, func(_ []byte, t jsonparser.ValueType, _ int, _ error) {
		bad = bad || t != jsonparser.Object && t != jsonparser.Null
	})
	if bad {
		st.bad++
		return
	}
	_, _ = jsonparser.ArrayEach(content, func(b []byte, _ jsonparser.ValueType, _ int, _ error) {
		textsAt(b, st, "text", "thinking")
	})
	if hasUsage {
		anthropicTotals(usage, st)
	}
	st.done = string(typ) == "message"
}
