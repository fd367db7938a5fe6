package seat

import (
	"encoding/json"
	"net/http"
	"strings"
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

// anthropicUsage is a usage object's counts, each absent unless given.
type anthropicUsage struct {
	InputTokens         *jsonCount `json:"input_tokens"`
	CacheCreationTokens *jsonCount `json:"cache_creation_input_tokens"`
	CacheReadTokens     *jsonCount `json:"cache_read_input_tokens"`
	OutputTokens        *jsonCount `json:"output_tokens"`
}

// take merges the usage's counts into st, field by field (see usage):
// fresh input, cache writes and cache reads sit beside one another
// (docs/log.md), so the prompt is their sum, and each cache field is
// also kept as its part: cache_read_input_tokens as cached_tokens,
// cache_creation_input_tokens as cache_write_tokens.
func (u *anthropicUsage) take(st *stream) {
	st.usage.beside = true
	for _, f := range [...]struct {
		v  *jsonCount
		to usageField
	}{{u.InputTokens, uInput}, {u.CacheCreationTokens, uCacheWrite}, {u.CacheReadTokens, uCached}, {u.OutputTokens, uCompletion}} {
		if f.v.present() {
			st.usage.set(f.to, f.v.n)
		}
	}
}

// anthropicBlock is a content block, or a delta.
type anthropicBlock struct {
	Type        string   `json:"type"`
	Text        jsonText `json:"text"`
	Thinking    jsonText `json:"thinking"`
	PartialJSON jsonText `json:"partial_json"` // tool-use input, streamed
	StopReason  jsonText `json:"stop_reason"`  // message_delta's
}

// anthropicEvent is one streamed event, or (type message) a whole answer.
type anthropicEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Usage *anthropicUsage `json:"usage"`
	} `json:"message"`
	ContentBlock *anthropicBlock  `json:"content_block"`
	Delta        *anthropicBlock  `json:"delta"`
	Usage        *anthropicUsage  `json:"usage"`
	Content      []anthropicBlock `json:"content"` // a whole answer's
}

// event reads one event with encoding/json: a targeted reader earned
// nothing here (BenchmarkReadStream). A document that does not decode
// (a member of the wrong shape) is a malformed event.
func (anthropicWire) event(typ string, data []byte, st *stream) {
	var e anthropicEvent
	if json.Unmarshal(data, &e) != nil {
		st.bad++
		return
	}
	if e.Type == "" {
		e.Type = typ // the data's type names the event; the SSE name is a fallback
	}
	switch e.Type {
	case "message_start":
		if e.Message != nil && e.Message.Usage != nil {
			u := *e.Message.Usage
			u.OutputTokens = nil // a provisional count; message_delta carries the total
			u.take(st)
		}
	case "content_block_start":
		if b := e.ContentBlock; b != nil {
			st.text(string(b.Text))
			st.text(string(b.Thinking))
		}
	case "content_block_delta":
		if d := e.Delta; d != nil {
			switch d.Type {
			case "text_delta":
				st.text(string(d.Text))
			case "thinking_delta":
				st.text(string(d.Thinking))
			case "input_json_delta":
				st.text(string(d.PartialJSON))
			}
		}
	case "message_delta":
		if e.Usage != nil {
			e.Usage.take(st) // cumulative, and maybe partial: merged by field
		}
		if d := e.Delta; d != nil && d.StopReason != "" {
			st.finished = true // the answer says it ended; message_stop follows
		}
	case "message_stop":
		st.done = true
	case "error":
		st.fail(errorCode(data))
	}
	// ping and event types added later are ignored, as the API asks.
}

// whole reads a non-streamed answer, a Message.
func (anthropicWire) whole(data []byte, st *stream) {
	var e anthropicEvent
	if json.Unmarshal(data, &e) != nil {
		st.bad++
		return
	}
	if e.Type == "error" {
		st.fail(errorCode(data))
		return
	}
	for _, b := range e.Content {
		st.text(string(b.Text))
		st.text(string(b.Thinking))
	}
	if e.Usage != nil {
		e.Usage.take(st)
	}
	st.done = e.Type == "message"
}
