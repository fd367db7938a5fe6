package proxy

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/retrygate/retrygate/admit"
)

// This file is a cut stream continued (docs/proxy.md, "Cut streams
// continued"). A stream committed to the client and then cut or stalled
// after content is not the end of the answer when a seat of the chain
// accepts an assistant prefill (seats.*.prefill): the proxy sends the
// client's request again there, with the text the client already has as
// a trailing assistant message, and stitches the remainder onto the
// client's open stream, so that the client reads one answer: the first
// attempt's id and model, no second preamble, one finish reason, one
// usage that adds up both attempts, one end. Only OpenAI chat and
// Anthropic messages streams are continued.

// stitch is what a call's committed stream has told the client so far,
// and how a continuation's events are rewritten onto it.
type stitch struct {
	anthropic bool
	id, model string      // the first chunk's (OpenAI chat)
	text      []byte      // the content the client has
	prior     admit.Usage // the usage of the attempts before the continuation
	contIn    int64       // a continuation's input tokens (Anthropic: its message_start's)
	// trimmed: the prefill went without the white space the client's
	// text ends in (Anthropic refuses it), so the continuation's own
	// leading white space is not sent again.
	trimmed bool
	// other: the stream carried more than one answer's text (a tool
	// call, a second choice, a block that is not text): a prefill of
	// its text would not continue it.
	other bool
}

// sseData is the data of one SSE event (its data lines joined by \n),
// and its event: name.
func sseData(ev []byte) (name string, data []byte) {
	for rest := ev; len(rest) > 0; {
		i := lineEnd(rest)
		line := rest
		if i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte("event:")); ok {
			name = string(bytes.TrimSpace(v))
			continue
		}
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v, _ = bytes.CutPrefix(v, []byte(" "))
		if data != nil {
			data = append(append(data, '\n'), v...)
		} else {
			data = bytes.Clone(v)
		}
	}
	return name, bytes.TrimSpace(data)
}

// observe reads one event of the stream the client gets (the first
// attempt's): its id and model, and its text.
func (s *stitch) observe(ev []byte) {
	name, data := sseData(ev)
	if len(data) == 0 || data[0] != '{' {
		return
	}
	if s.anthropic {
		if name == "content_block_start" {
			var e struct {
				Block struct {
					Type string `json:"type"`
				} `json:"content_block"`
			}
			s.other = s.other || json.Unmarshal(data, &e) == nil && e.Block.Type != "text"
		}
		if name == "content_block_delta" {
			var e struct {
				Delta struct {
					Type, Text string
				} `json:"delta"`
			}
			if json.Unmarshal(data, &e) == nil && e.Delta.Type == "text_delta" {
				s.text = append(s.text, e.Delta.Text...)
			}
		}
		return
	}
	var e struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Content   string          `json:"content"`
				ToolCalls json.RawMessage `json:"tool_calls"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(data, &e) != nil {
		return
	}
	for _, c := range e.Choices {
		s.other = s.other || c.Index != 0 || len(c.Delta.ToolCalls) > 0 && string(c.Delta.ToolCalls) != "null"
	}
	if s.id == "" {
		s.id, s.model = e.ID, e.Model
	}
	for _, c := range e.Choices {
		s.text = append(s.text, c.Delta.Content...)
	}
}

// rewrite is a continuation's event as the client gets it, nil to drop
// it; the text it carries is observed.
func (s *stitch) rewrite(ev []byte) []byte {
	name, data := sseData(ev)
	if len(data) == 0 || data[0] != '{' {
		return ev // [DONE], a comment, a keep-alive
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return ev
	}
	if s.anthropic {
		return s.rewriteAnthropic(name, ev, data, m)
	}
	s.observeText(data)
	if s.id != "" {
		m["id"], _ = json.Marshal(s.id)
	}
	if s.model != "" {
		m["model"], _ = json.Marshal(s.model)
	}
	keep := false
	var choices []map[string]json.RawMessage
	if json.Unmarshal(m["choices"], &choices) == nil {
		for _, c := range choices {
			var d map[string]json.RawMessage
			if json.Unmarshal(c["delta"], &d) == nil {
				delete(d, "role") // the client has its role chunk
				if cont, ok := d["content"]; ok && string(cont) == `""` {
					delete(d, "content")
				}
				if len(d) > 0 {
					keep = true
				}
				c["delta"], _ = json.Marshal(d)
			}
			if fr, ok := c["finish_reason"]; ok && string(fr) != "null" {
				keep = true
			}
		}
		m["choices"], _ = json.Marshal(choices)
	}
	if u, ok := m["usage"]; ok && string(u) != "null" {
		keep = true
		var us map[string]json.RawMessage
		if json.Unmarshal(u, &us) == nil {
			p := addInt(us, "prompt_tokens", s.prior.Prompt)
			c := addInt(us, "completion_tokens", s.prior.Completion)
			us["total_tokens"], _ = json.Marshal(p + c)
			m["usage"], _ = json.Marshal(us)
		}
	}
	if !keep {
		return nil
	}
	out, _ := json.Marshal(m)
	return append(append([]byte("data: "), out...), '\n', '\n')
}

func (s *stitch) observeText(data []byte) {
	var e struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(data, &e) == nil {
		for _, c := range e.Choices {
			s.text = append(s.text, c.Delta.Content...)
		}
	}
}

// rewriteAnthropic: the continuation's message_start and its first
// content block's start are dropped (the client's message and block are
// open); message_delta's usage adds up both attempts.
func (s *stitch) rewriteAnthropic(name string, ev, data []byte, m map[string]json.RawMessage) []byte {
	switch name {
	case "message_start":
		var e struct {
			Message struct {
				Usage struct {
					In int64 `json:"input_tokens"`
				} `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(data, &e) == nil {
			s.contIn = e.Message.Usage.In
		}
		return nil
	case "ping":
		return nil
	case "content_block_start":
		var e struct {
			Index int `json:"index"`
		}
		if json.Unmarshal(data, &e) == nil && e.Index == 0 {
			return nil
		}
		return ev
	case "content_block_delta":
		if s.trimmed {
			var e struct {
				Delta map[string]json.RawMessage `json:"delta"`
			}
			var text string
			if json.Unmarshal(data, &e) == nil && json.Unmarshal(e.Delta["text"], &text) == nil {
				if text = strings.TrimLeft(text, " \t\r\n"); text == "" {
					return nil
				}
				s.trimmed = false
				e.Delta["text"], _ = json.Marshal(text)
				m["delta"], _ = json.Marshal(e.Delta)
				out, _ := json.Marshal(m)
				ev = []byte("event: content_block_delta\ndata: " + string(out) + "\n\n")
			}
		}
		s.observe(ev)
		return ev
	case "message_delta":
		var us map[string]json.RawMessage
		if json.Unmarshal(m["usage"], &us) != nil {
			return ev
		}
		addInt(us, "output_tokens", s.prior.Completion)
		if _, ok := us["input_tokens"]; !ok {
			us["input_tokens"] = json.RawMessage("0")
		}
		addInt(us, "input_tokens", s.prior.Prompt+s.contIn)
		m["usage"], _ = json.Marshal(us)
		out, _ := json.Marshal(m)
		return []byte("event: message_delta\ndata: " + string(out) + "\n\n")
	}
	return ev
}

// addInt adds n to the integer field k of m, and returns the sum.
func addInt(m map[string]json.RawMessage, k string, n int64) int64 {
	var v int64
	_ = json.Unmarshal(m[k], &v)
	v += n
	m[k], _ = json.Marshal(v)
	return v
}

// prefill is the client's body with the text the client has as a
// trailing assistant message (withPrefill).
func (s *stitch) prefill(body []byte) []byte {
	text := string(s.text)
	s.trimmed = s.anthropic && strings.TrimRight(text, " \t\r\n") != text
	return withPrefill(body, text, s.anthropic)
}

// withPrefill is the client's body with text as a trailing assistant
// message (OpenAI chat and Anthropic messages both take it in messages);
// nil when the body has no messages array. Anthropic refuses a final
// assistant turn that ends in white space: it is trimmed there.
func withPrefill(body []byte, text string, anthropic bool) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	var msgs []json.RawMessage
	if json.Unmarshal(m["messages"], &msgs) != nil || len(msgs) == 0 {
		return nil
	}
	if anthropic {
		text = strings.TrimRight(text, " \t\r\n")
	}
	a, _ := json.Marshal(map[string]string{"role": "assistant", "content": text})
	msgs = append(msgs, a)
	m["messages"], _ = json.Marshal(msgs)
	out, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return out
}
