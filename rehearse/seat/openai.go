package seat

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/buger/jsonparser"
)

// openaiWire speaks the Chat Completions API: POST {base_url}/chat/completions
// with stream: true, reading chat.completion.chunk events until data: [DONE].
type openaiWire struct {
	maxParam string // max_tokens or max_completion_tokens
}

type openaiRequest struct {
	Model         string    `json:"model"`
	Messages      []Message `json:"messages"`
	Stream        bool      `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           int `json:"max_tokens,omitempty"`
	MaxCompletionTokens int `json:"max_completion_tokens,omitempty"`
}

// openaiMaxParam picks the field for Request.MaxTokens. OpenAI deprecated
// max_tokens for max_completion_tokens and its reasoning models refuse
// max_tokens; but compatible servers (Ollama's /v1, llama.cpp, older
// vLLM) honour max_tokens and may silently ignore the newer field, which
// leaves generation unbounded. So: the override when set, else the newer
// field only for OpenAI's own reasoning models.
func openaiMaxParam(override, model string) string {
	if override != "" {
		return override
	}
	m := strings.ToLower(model)
	for _, p := range []string{"o1", "o3", "o4", "gpt-5"} {
		if m == p || strings.HasPrefix(m, p+"-") {
			return "max_completion_tokens"
		}
	}
	return "max_tokens"
}

func (openaiWire) path() string { return "/chat/completions" }
func (openaiWire) ndjson() bool { return false }

func (openaiWire) header(h http.Header, key string) {
	h.Set("Accept", "text/event-stream")
	SetAuth(h, "openai", key)
}

func (w openaiWire) body(model string, req Request) []byte {
	r := openaiRequest{
		Model:    model,
		Messages: req.chat(),
		Stream:   true,
	}
	r.StreamOptions.IncludeUsage = true // the only way a stream reports usage
	if req.MaxTokens > 0 {
		if w.maxParam == "max_completion_tokens" {
			r.MaxCompletionTokens = req.MaxTokens
		} else {
			r.MaxTokens = req.MaxTokens
		}
	}
	b, _ := json.Marshal(r) // plain strings and ints: cannot fail
	return b
}

func (w openaiWire) event(typ string, data []byte, st *stream) {
	if typ == "error" {
		st.fail(errorCode(data))
		return
	}
	w.eventWith(data, st, w.chunk)
}

// eventWith reads one event's data: [DONE], or a chunk read by chunk.
func (openaiWire) eventWith(data []byte, st *stream, chunk func([]byte, *stream)) {
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		st.done = true
		return
	}
	chunk(data, st)
}

func (w openaiWire) whole(data []byte, st *stream) {
	w.chunk(data, st)
	if !st.failed && st.bad == 0 {
		st.done = true
	}
}

// chunk reads one chat.completion.chunk (or a whole answer) by targeted
// field extraction, as the other wires read theirs: this runs for every
// event inside the timed window. A document that is not valid JSON, or
// whose choices, choice or delta has the wrong shape, is a malformed
// event, as encoding/json would have it.
func (openaiWire) chunk(data []byte, st *stream) {
	obj, ok := jsonObject(data, st)
	if !ok {
		return
	}
	if _, t, _, err := jsonparser.Get(obj, "error"); err == nil && t != jsonparser.Null {
		st.fail(errorCode(obj))
		return
	}
	choices, _, bad := member(obj, jsonparser.Array, "choices")
	_, _ = jsonparser.ArrayEach(choices, func(ch []byte, t jsonparser.ValueType, _ int, _ error) {
		if bad || t != jsonparser.Object {
			bad = bad || t != jsonparser.Null
			return
		}
		if fr, ok := stringMember(ch, "finish_reason"); ok && fr != "" {
			st.finished = true // the answer says it ended; usage and [DONE] may follow
		}
		d, present, wrong := member(ch, jsonparser.Object, "message") // a non-streamed answer
		if !present && !wrong {
			d, present, wrong = member(ch, jsonparser.Object, "delta")
		}
		bad = wrong
		if !present {
			return
		}
		textsAt(d, st, openaiTextFields[:]...)
		if calls, ok, _ := member(d, jsonparser.Array, "tool_calls"); ok {
			_, _ = jsonparser.ArrayEach(calls, func(c []byte, _ jsonparser.ValueType, _ int, _ error) {
				if v, vt, _, err := jsonparser.Get(c, "function", "arguments"); err == nil {
					textOf(v, vt, st)
				}
			})
		}
	})
	if bad {
		st.bad++
		return
	}
	if u, ok, _ := member(obj, jsonparser.Object, "usage"); ok {
		chatUsage.read(u, st)
	}
}

// usageNames are a usage object's names for the counts and their parts:
// cached and cache-written input inside the prompt count, reasoning
// inside the completion (docs/log.md).
type usageNames struct{ prompt, completion, promptDetails, completionDetails string }

var (
	// chatUsage is Chat Completions' (an exec seat's usage line has the
	// same), where compatible gateways (OpenRouter) also name cache writes.
	chatUsage      = usageNames{"prompt_tokens", "completion_tokens", "prompt_tokens_details", "completion_tokens_details"}
	responsesUsage = usageNames{"input_tokens", "output_tokens", "input_tokens_details", "output_tokens_details"}
)

// read takes a usage object's counts and parts into st.
func (n usageNames) read(usage []byte, st *stream) {
	for _, f := range [...]struct {
		keys []string
		to   usageField
	}{
		{[]string{n.prompt}, uPrompt},
		{[]string{n.completion}, uCompletion},
		{[]string{n.promptDetails, "cached_tokens"}, uCached},
		{[]string{n.promptDetails, "cache_write_tokens"}, uCacheWrite},
		{[]string{n.completionDetails, "reasoning_tokens"}, uReasoning},
	} {
		if v, ok := countOf(usage, f.keys...); ok {
			st.usage.set(f.to, v)
		}
	}
}

// openaiTextFields are a delta's generated text, in order: reasoning
// (DeepSeek and vLLM's reasoning_content, OpenRouter's reasoning), the
// content, and a refusal.
var openaiTextFields = [...]string{"reasoning_content", "reasoning", "content", "refusal"}
