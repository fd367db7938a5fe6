package seat

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/buger/jsonparser"
)

// ollamaWire speaks Ollama's native chat API: POST {base_url}/api/chat,
// answered with NDJSON objects until one says done: true, which carries
// prompt_eval_count and eval_count.
type ollamaWire struct{}

type ollamaRequest struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	Stream   bool      `json:"stream"`
	Options  *struct {
		NumPredict int `json:"num_predict"`
	} `json:"options,omitempty"`
}

func (ollamaWire) path() string { return "/api/chat" }
func (ollamaWire) ndjson() bool { return true }

func (ollamaWire) header(h http.Header, key string) {
	h.Set("Accept", "application/x-ndjson")
	SetAuth(h, "ollama", key)
}

func (ollamaWire) body(model string, req Request) []byte {
	r := ollamaRequest{
		Model:    model,
		Messages: req.chat(),
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

// event reads one NDJSON line by targeted field extraction (see
// openaiWire.chunk).
func (ollamaWire) event(_ string, data []byte, st *stream) {
	obj, ok := jsonObject(data, st)
	if !ok {
		return
	}
	if _, t, _, err := jsonparser.Get(obj, "error"); err == nil && t != jsonparser.Null {
		// Ollama's errors are a bare string: no code to classify by.
		st.fail(errorCode(obj))
		return
	}
	msg, hasMsg, wrongMsg := member(obj, jsonparser.Object, "message")
	done, hasDone, wrongDone := member(obj, jsonparser.Boolean, "done")
	if wrongMsg || wrongDone {
		st.bad++
		return
	}
	if hasMsg {
		textsAt(msg, st, "thinking", "content")
		if tc, t, _, err := jsonparser.Get(msg, "tool_calls"); err == nil && t != jsonparser.Null {
			if t == jsonparser.String {
				st.text(`"` + string(tc) + `"`) // the raw JSON, quotes and all
			} else if tc = bytes.TrimSpace(tc); len(tc) > 0 && !bytes.Equal(tc, []byte("[]")) {
				st.text(string(tc))
			}
		}
	}
	textsAt(obj, st, "response") // /api/generate's field, harmless here
	if hasDone && bytes.Equal(done, []byte("true")) {
		// prompt_eval_count is left out when the whole prompt came from
		// Ollama's cache; the tokenizer fills in then.
		if n, ok := countOf(obj, "prompt_eval_count"); ok {
			st.usage.set(uPrompt, n)
		}
		if n, ok := countOf(obj, "eval_count"); ok {
			st.usage.set(uCompletion, n)
		}
		st.done = true
	}
}

func (w ollamaWire) whole(data []byte, st *stream) { w.event("", data, st) }
