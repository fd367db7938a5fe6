package seat

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

func TestAnthropicRequestShape(t *testing.T) {
	got := make(chan http.Header, 1)
	var body map[string]any
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		h := r.Header.Clone()
		h.Set("X-Path", r.URL.Path)
		got <- h
		sw := startStream(w, "text/event-stream")
		sw.event("message_stop", `{"type":"message_stop"}`)
	}))
	obs := do(t, newTestSeat(t, "anthropic", srv.URL, func(c *Config) { c.Model = "claude-sonnet-4-5" }), 2*time.Second,
		Request{IdempotencyKey: "job-7", Prompt: "hi"})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	h := <-got
	assert.Equal(t, "/v1/messages", h.Get("X-Path"))
	assert.Equal(t, testKey, h.Get("X-Api-Key"))
	assert.Equal(t, "2023-06-01", h.Get("Anthropic-Version"))
	assert.Empty(t, h.Get("Authorization"))
	assert.Equal(t, "job-7", h.Get("Idempotency-Key"))
	assert.Equal(t, true, body["stream"])
	assert.Equal(t, float64(anthropicDefaultMax), body["max_tokens"], "max_tokens is required by the API")
	assert.Equal(t, "claude-sonnet-4-5", body["model"])
}

// TestAnthropicUsage: input = input + cache creation + cache read from
// message_start; output from message_delta, cumulative (replaced, never
// added to message_start's provisional count); ping ignored.
func TestAnthropicUsage(t *testing.T) {
	srv := loopback(t, sseHandler(2*time.Millisecond,
		"event: message_start\n"+data(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":1}}}`),
		"event: content_block_start\n"+data(`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`),
		"event: ping\n"+data(`{"type":"ping"}`),
		"event: content_block_delta\n"+data(`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm."}}`),
		"event: content_block_delta\n"+data(`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}`),
		"event: content_block_stop\n"+data(`{"type":"content_block_stop","index":0}`),
		"event: content_block_start\n"+data(`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`),
		"event: content_block_delta\n"+data(anText("Hello")),
		"event: message_delta\n"+data(`{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":10}}`),
		"event: content_block_delta\n"+data(anText(" world")),
		"event: message_delta\n"+data(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`),
		"event: some_future_event\n"+data(`{"type":"some_future_event"}`),
		"event: message_stop\n"+data(`{"type":"message_stop"}`),
	))
	obs := do(t, newTestSeat(t, "anthropic", srv.URL), 2*time.Second, Request{})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.Equal(t, int64(1125), obs.PromptTokens)
	assert.Equal(t, int64(15), obs.CompletionTokens)
	assert.Equal(t, FromUsage, obs.TokensFrom)
}

// TestAnthropicThinkingIsFirstToken: ping and an empty block start do
// not count; the first thinking_delta does.
func TestAnthropicThinkingIsFirstToken(t *testing.T) {
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sw := startStream(w, "text/event-stream")
		sw.event("message_start", `{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}`)
		sw.event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`)
		sleepUntil(t0, 50*time.Millisecond)
		sw.event("ping", `{"type":"ping"}`)
		sleepUntil(t0, 110*time.Millisecond)
		sw.event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me see"}}`)
		sleepUntil(t0, 200*time.Millisecond)
		sw.event("content_block_delta", anText("Yes"))
		sw.event("message_stop", `{"type":"message_stop"}`)
	}))
	obs := do(t, newTestSeat(t, "anthropic", srv.URL), 2*time.Second, Request{})
	require.Equal(t, admit.OK, obs.Outcome)
	logTiming(t, "anthropic", "wait-thinking", 110*time.Millisecond, obs.Wait)
	requireTimed(t, 110*time.Millisecond, obs.Wait, "wait")
	// message_start gave input but no message_delta came: output is counted locally.
	assert.Equal(t, int64(3), obs.PromptTokens)
	assert.Equal(t, FromMixed, obs.TokensFrom, "each count keeps its own source")
	assert.Equal(t, FromUsage, obs.PromptFrom)
	assert.Equal(t, FromTokenizer, obs.CompletionFrom)
	assert.Positive(t, obs.CompletionTokens)
}

func TestOllamaCounts(t *testing.T) {
	var body map[string]any
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/chat" {
			http.NotFound(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		sw := startStream(w, "application/x-ndjson")
		sw.line(`{"model":"m","message":{"role":"assistant","content":"","thinking":"hmm"},"done":false}`)
		sw.line(olText("Hi"))
		sw.line("")
		sw.line(`{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":1,"prompt_eval_count":26,"prompt_eval_duration":1,"eval_count":298,"eval_duration":1}`)
	}))
	obs := do(t, newTestSeat(t, "ollama", srv.URL, func(c *Config) { c.Model = "llama3.2" }), 2*time.Second, Request{MaxTokens: 300})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.Equal(t, int64(26), obs.PromptTokens)
	assert.Equal(t, int64(298), obs.CompletionTokens)
	assert.Equal(t, FromUsage, obs.TokensFrom)
	assert.Equal(t, true, body["stream"])
	assert.Equal(t, map[string]any{"num_predict": float64(300)}, body["options"])
}

// TestOllamaCachedPrompt: prompt_eval_count is absent when the prompt
// came from Ollama's cache; the tokenizer fills in for it.
func TestOllamaCachedPrompt(t *testing.T) {
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := startStream(w, "application/x-ndjson")
		sw.line(olText("Hi"))
		sw.line(`{"model":"m","message":{"role":"assistant","content":""},"done":true,"eval_count":2}`)
	}))
	obs := do(t, newTestSeat(t, "ollama", srv.URL), 2*time.Second, Request{Prompt: "one two three"})
	require.Equal(t, admit.OK, obs.Outcome)
	assert.Equal(t, int64(2), obs.CompletionTokens)
	assert.Equal(t, int64(3), obs.PromptTokens)
	assert.Equal(t, FromMixed, obs.TokensFrom, "each count keeps its own source")
	assert.Equal(t, FromTokenizer, obs.PromptFrom)
	assert.Equal(t, FromUsage, obs.CompletionFrom)
}
