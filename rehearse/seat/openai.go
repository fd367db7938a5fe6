package seat

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// openaiWire speaks the Chat Completions API: POST {base_url}/chat/completions
// with stream: true, reading chat.completion.chunk events until data: [DONE].
type openaiWire struct {
	maxParam string // max_tokens or max_completion_tokens
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type openaiRequest struct {
	Model         string        `json:"model"`
	Messages      []chatMessage `json:"messages"`
	Stream        bool          `json:"stream"`
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
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
}

func (w openaiWire) body(model string, req Request) []byte {
	r := openaiRequest{
		Model:    model,
		Messages: []chatMessage{{Role: "user", Content: req.Prompt}},
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

// openaiDelta is a chunk's delta, or a whole answer's message.
type openaiDelta struct {
	Content          jsonText `json:"content"`
	ReasoningContent jsonText `json:"reasoning_content"` // DeepSeek, vLLM
	Reasoning        jsonText `json:"reasoning"`         // OpenRouter, newer vLLM
	Refusal          jsonText `json:"refusal"`
	ToolCalls        []struct {
		Function struct {
			Arguments jsonText `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type openaiChunk struct {
	// Choices may be null, [] (the usage chunk) or absent.
	Choices []struct {
		Delta   openaiDelta  `json:"delta"`
		Message *openaiDelta `json:"message"` // a non-streamed answer
	} `json:"choices"`
	Usage *struct {
		PromptTokens     *jsonInt `json:"prompt_tokens"`
		CompletionTokens *jsonInt `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func (w openaiWire) event(typ string, data []byte, st *stream) {
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		st.done = true
		return
	}
	if typ == "error" {
		st.fail(errorCode(data))
		return
	}
	w.chunk(data, st)
}

func (w openaiWire) whole(data []byte, st *stream) {
	w.chunk(data, st)
	if !st.failed && st.bad == 0 {
		st.done = true
	}
}

func (openaiWire) chunk(data []byte, st *stream) {
	var c openaiChunk
	if err := json.Unmarshal(data, &c); err != nil {
		st.bad++
		return
	}
	if hasError(c.Error) {
		st.fail(errorCode(data))
		return
	}
	for _, ch := range c.Choices {
		d := ch.Delta
		if ch.Message != nil {
			d = *ch.Message
		}
		st.text(string(d.ReasoningContent))
		st.text(string(d.Reasoning))
		st.text(string(d.Content))
		st.text(string(d.Refusal))
		for _, tc := range d.ToolCalls {
			st.text(string(tc.Function.Arguments))
		}
	}
	if u := c.Usage; u != nil {
		if u.PromptTokens.present() {
			st.usagePrompt(u.PromptTokens.value())
		}
		if u.CompletionTokens.present() {
			st.usageCompletion(u.CompletionTokens.value())
		}
	}
}
