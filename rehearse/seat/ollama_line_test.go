package seat

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The reference decoder: the encoding/json reading of an Ollama line
// that the targeted extraction in ollamaWire.event replaced.
type ollamaLine struct {
	Message *struct {
		Content   jsonText        `json:"content"`
		Thinking  jsonText        `json:"thinking"`
		ToolCalls json.RawMessage `json:"tool_calls"`
	} `json:"message"`
	Response        jsonText        `json:"response"` // /api/generate's field, harmless here
	Done            bool            `json:"done"`
	PromptEvalCount *jsonCount      `json:"prompt_eval_count"`
	EvalCount       *jsonCount      `json:"eval_count"`
	Error           json.RawMessage `json:"error"`
}

func referenceOllama(data []byte, st *stream) {
	var l ollamaLine
	if err := json.Unmarshal(data, &l); err != nil {
		st.bad++
		return
	}
	if hasError(l.Error) {
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
		if l.PromptEvalCount.present() {
			st.usage.set(uPrompt, l.PromptEvalCount.value())
		}
		if l.EvalCount.present() {
			st.usage.set(uCompletion, l.EvalCount.value())
		}
		st.done = true
	}
}

// FuzzOllamaLine: the fast line reader agrees with encoding/json.
func FuzzOllamaLine(f *testing.F) {
	for _, s := range []string{
		olText("hello"), olText("caf\u00e9 \n"),
		`{"model":"m","message":{"role":"assistant","content":"","thinking":"hm"},"done":true,"prompt_eval_count":12,"eval_count":9e18}`,
		`{"message":{"tool_calls":[{"function":{"name":"f","arguments":{"x":1}}}]},"done":false}`,
		`{"error":"model not found"}`, `{"done":"yes"}`, `{"message":"x"}`, `null`, `{"response":"gen","done":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || skipKeyQuirks(data, "error", "message", "content", "thinking", "tool_calls", "response", "done", "prompt_eval_count", "eval_count") {
			return
		}
		var got, want stream
		got.onContent, want.onContent = func() {}, func() {}
		ollamaWire{}.event("", data, &got)
		referenceOllama(data, &want)
		compareStreams(t, &got, &want)
	})
}
