package seat

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// ollamaWire speaks Ollama's native chat API: POST {base_url}/api/chat,
// answered with NDJSON objects until one says done: true, which carries
// prompt_eval_count and eval_count.
type ollamaWire struct{}

type ollamaRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	Stream   bool          `json:"stream"`
	Options  *struct {
		NumPredict int `json:"num_predict"`
	} `json:"options,omitempty"`
}

func (ollamaWire) path() string { return "/api/chat" }
func (ollamaWire) ndjson() bool { return true }

func (ollamaWire) header(h http.Header, key string) {
	h.Set("Accept", "application/x-ndjson")
	if key != "" {
		h.Set("Authorization", "Bearer "+key) // e.g. an Ollama behind an auth proxy
	}
}

func (ollamaWire) body(model string, req Request) []byte {
	r := ollamaRequest{
		Model:    model,
		Messages: []chatMessage{{Role: "user", Content: req.Prompt}},
		Stream:   true,
	}
	if req.MaxTokens > 0 {
		r.Options = &struct {
			NumPredict int `json:"num_predict"`
		}{req.MaxTokens}
	}
	b, _ := json.Marshal(r)
	return b
}

type ollamaLine struct {
	Message *struct {
		Content   jsonText        `json:"content"`
		Thinking  jsonText        `json:"thinking"`
		ToolCalls json.RawMessage `json:"tool_calls"`
	} `json:"message"`
	Response        jsonText        `json:"response"` // /api/generate's field, harmless here
	Done            bool            `json:"done"`
	PromptEvalCount *jsonInt        `json:"prompt_eval_count"`
	EvalCount       *jsonInt        `json:"eval_count"`
	Error           json.RawMessage `json:"error"`
}

func (ollamaWire) event(_ string, data []byte, st *stream) {
	var l ollamaLine
	if err := json.Unmarshal(data, &l); err != nil {
		st.bad++
		return
	}
	if hasError(l.Error) {
		// Ollama's errors are a bare string: no code to classify by.
		st.fail(errorCode(data))
		return
	}
	if m := l.Message; m != nil {
		st.text(string(m.Thinking))
		st.text(string(m.Content))
		if tc := bytes.TrimSpace(m.ToolCalls); len(tc) > 0 && !bytes.Equal(tc, []byte("null")) && !bytes.Equal(tc, []byte("[]")) {
			st.text(string(tc))
		}
	}
	st.text(string(l.Response))
	if l.Done {
		// prompt_eval_count is left out when the whole prompt came from
		// Ollama's cache; the tokenizer fills in then.
		if l.PromptEvalCount.present() {
			st.usagePrompt(l.PromptEvalCount.value())
		}
		if l.EvalCount.present() {
			st.usageCompletion(l.EvalCount.value())
		}
		st.done = true
	}
}

func (w ollamaWire) whole(data []byte, st *stream) { w.event("", data, st) }
