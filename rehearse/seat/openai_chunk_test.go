package seat

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The reference decoder: the encoding/json reading of a chunk that the
// targeted extraction in openaiWire.chunk replaced. Both must agree.
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
		Delta        openaiDelta     `json:"delta"`
		Message      *openaiDelta    `json:"message"` // a non-streamed answer
		FinishReason json.RawMessage `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     *jsonCount `json:"prompt_tokens"`
		CompletionTokens *jsonCount `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func referenceChunk(data []byte, st *stream) {
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
		if nonEmptyString(ch.FinishReason) {
			st.finished = true
		}
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
			st.usage.set(uPrompt, u.PromptTokens.value())
		}
		if u.CompletionTokens.present() {
			st.usage.set(uCompletion, u.CompletionTokens.value())
		}
	}
}

// FuzzOpenAIChunk: the fast chunk reader finds the same text, usage,
// error and malformed verdict as encoding/json on well-formed chunks.
func FuzzOpenAIChunk(f *testing.F) {
	for _, s := range []string{
		oaText("hello"), oaText("caf\u00e9 \"q\" \\ \n"), oaUsage(12, 40),
		`{"choices":[{"delta":{"reasoning_content":"think","content":[{"type":"text","text":"a"},{"text":"b"}]}}]}`,
		`{"choices":[{"message":{"content":"whole"}}],"usage":{"prompt_tokens":9e18,"completion_tokens":-1}}`,
		`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\"x\":1}"}}]}}]}`,
		`{"error":{"code":"rate_limit_exceeded"}}`, `{"choices":"nope"}`, `{"choices":null}`, `null`, `[1]`,
		`{"choices":[{"delta":{"content":null,"refusal":"no"}}],"usage":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // both call it malformed; the texts are not compared
		}
		if skipKeyQuirks(data, "error", "choices", "delta", "message", "content", "reasoning", "reasoning_content", "refusal", "tool_calls", "function", "arguments", "usage", "prompt_tokens", "completion_tokens", "text") {
			return
		}
		var got, want stream
		got.onContent, want.onContent = func() {}, func() {}
		openaiWire{}.chunk(data, &got)
		referenceChunk(data, &want)
		compareStreams(t, &got, &want)
	})
}

// skipKeyQuirks: encoding/json matches keys case-insensitively and keeps
// the last of duplicates; the wire formats have neither, and the fast
// readers match exactly and keep the first. Documents that lean on those
// quirks are not compared.
func skipKeyQuirks(data []byte, keys ...string) bool {
	lower := bytes.ToLower(data)
	for _, k := range keys {
		q := []byte(`"` + k + `"`)
		if n := bytes.Count(data, q); bytes.Count(lower, q) != n || n > 1 {
			return true
		}
	}
	return false
}

// nonEmptyString says raw is a JSON string with something in it.
func nonEmptyString(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil && s != ""
}

// compareStreams holds a fast reader's stream to the reference's: the
// same malformed verdict, error, text (invalid UTF-8 read as U+FFFD on
// both sides), usage and end.
func compareStreams(t *testing.T, got, want *stream) {
	t.Helper()
	norm := func(b []byte) string { return string([]rune(string(b))) }
	if (got.bad > 0) != (want.bad > 0) {
		t.Fatalf("malformed: got %d bad events, want %d", got.bad, want.bad)
	}
	if got.failed != want.failed || got.code != want.code {
		t.Fatalf("error: got %v %q, want %v %q", got.failed, got.code, want.failed, want.code)
	}
	if want.bad > 0 {
		return
	}
	if norm(got.counter.held) != norm(want.counter.held) {
		t.Fatalf("text: got %q, want %q", got.counter.held, want.counter.held)
	}
	if got.usage != want.usage || got.done != want.done || got.finished != want.finished {
		t.Fatalf("usage or end: got %+v done %v finished %v, want %+v done %v finished %v", got.usage, got.done, got.finished, want.usage, want.done, want.finished)
	}
}
