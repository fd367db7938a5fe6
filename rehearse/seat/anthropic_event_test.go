package seat

import (
	"encoding/json"
	"testing"
)

type anthropicUsage struct {
	InputTokens         *jsonCount `json:"input_tokens"`
	CacheCreationTokens *jsonCount `json:"cache_creation_input_tokens"`
	CacheReadTokens     *jsonCount `json:"cache_read_input_tokens"`
	OutputTokens        *jsonCount `json:"output_tokens"`
}

// take merges the usage's counts into st, field by field, the cache
// fields beside input_tokens.
func (u *anthropicUsage) take(st *stream) {
	st.usage.beside = true
	for _, f := range []struct {
		v  *jsonCount
		to usageField
	}{{u.InputTokens, uInput}, {u.CacheCreationTokens, uCacheWrite}, {u.CacheReadTokens, uCached}, {u.OutputTokens, uCompletion}} {
		if f.v.present() {
			st.usage.set(f.to, f.v.value())
		}
	}
}

type anthropicBlock struct {
	Type        string          `json:"type"`
	Text        jsonText        `json:"text"`
	Thinking    jsonText        `json:"thinking"`
	PartialJSON jsonText        `json:"partial_json"` // tool-use input, streamed
	StopReason  json.RawMessage `json:"stop_reason"`  // message_delta's
}

type anthropicEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Content []anthropicBlock `json:"content"`
		Usage   *anthropicUsage  `json:"usage"`
	} `json:"message"`
	ContentBlock *anthropicBlock `json:"content_block"`
	Delta        *anthropicBlock `json:"delta"`
	Usage        *anthropicUsage `json:"usage"`
	// A non-streamed answer is a Message at the top level.
	Content []anthropicBlock `json:"content"`
}

// The reference decoder: the encoding/json reading of an Anthropic event
// that the targeted extraction in anthropicWire.event replaced.
func referenceAnthropic(_ anthropicWire, typ string, data []byte, st *stream) {
	var e anthropicEvent
	if err := json.Unmarshal(data, &e); err != nil {
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
		if u := e.Usage; u != nil {
			u.take(st) // cumulative, and maybe partial: merged by field
		}
		if d := e.Delta; d != nil && nonEmptyString(d.StopReason) {
			st.finished = true
		}
	case "message_stop":
		st.done = true
	case "error":
		st.fail(errorCode(data))
	}
	// ping and event types added later are ignored, as the API asks.
}

// FuzzAnthropicEvent: the fast event reader agrees with encoding/json.
func FuzzAnthropicEvent(f *testing.F) {
	for _, s := range []string{
		anText("hello"), anText("caf\u00e9"),
		`{"type":"message_start","message":{"usage":{"input_tokens":12,"cache_read_input_tokens":9e18,"output_tokens":1}}}`,
		`{"type":"content_block_start","content_block":{"type":"thinking","thinking":"hm"}}`,
		`{"type":"content_block_delta","delta":{"type":"input_json_delta","partial_json":"{\"a\""}}`,
		`{"type":"message_delta","usage":{"output_tokens":40}}`, `{"type":"message_stop"}`,
		`{"type":"error","error":{"type":"overloaded_error"}}`, `{"type":7}`, `{"delta":"x"}`, `null`,
	} {
		f.Add([]byte(s), "")
	}
	f.Add([]byte(`{"delta":{"type":"text_delta","text":"x"}}`), "content_block_delta")
	f.Fuzz(func(t *testing.T, data []byte, typ string) {
		if !json.Valid(data) || skipKeyQuirks(data, "type", "message", "content_block", "delta", "usage", "text", "thinking", "partial_json",
			"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens", "error", "content") {
			return
		}
		var got, want stream
		got.onContent, want.onContent = func() {}, func() {}
		anthropicWire{}.event(typ, data, &got)
		referenceAnthropic(anthropicWire{}, typ, data, &want)
		compareStreams(t, &got, &want)
	})
}

// referenceAnthropicWhole is the encoding/json reading of a non-streamed
// answer that anthropicWire.whole replaced.
func referenceAnthropicWhole(data []byte, st *stream) {
	var e anthropicEvent
	if err := json.Unmarshal(data, &e); err != nil {
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
	if u := e.Usage; u != nil {
		u.take(st)
	}
	st.done = e.Type == "message"
}

// FuzzAnthropicWhole: the targeted reading of a whole Message agrees
// with encoding/json on its text, usage, error and end.
func FuzzAnthropicWhole(f *testing.F) {
	for _, s := range []string{
		`{"type":"message","content":[{"type":"text","text":"hi"},{"type":"thinking","thinking":"hm"}],"usage":{"input_tokens":3,"cache_read_input_tokens":2,"output_tokens":5}}`,
		`{"type":"error","error":{"type":"overloaded_error"}}`, `{"type":"message","content":[null,{"text":["x"]}]}`,
		`{"type":"message","content":"x"}`, `{"content":[1]}`, `{"usage":null}`, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || skipKeyQuirks(data, "type", "content", "usage", "text", "thinking",
			"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens", "error") {
			return
		}
		var got, want stream
		got.onContent, want.onContent = func() {}, func() {}
		anthropicWire{}.whole(data, &got)
		referenceAnthropicWhole(data, &want)
		compareStreams(t, &got, &want)
	})
}
