package seat

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// sseHandler plays frames (each already a full data/event block) with a
// pause before each, as text/event-stream.
func sseHandler(pause time.Duration, frames ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := startStream(w, "text/event-stream")
		for _, f := range frames {
			time.Sleep(pause)
			sw.raw(f)
		}
	}
}

func data(json string) string { return "data: " + json + "\n\n" }

func TestOpenAIRequestShape(t *testing.T) {
	tests := []struct {
		model, override, wantParam string
	}{
		{"gpt-4o-mini", "", "max_tokens"},
		{"llama3.1:8b", "", "max_tokens"},
		{"o3-mini", "", "max_completion_tokens"},
		{"gpt-5", "", "max_completion_tokens"},
		{"llama3.1:8b", "max_completion_tokens", "max_completion_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.model+"/"+tt.override, func(t *testing.T) {
			var got struct {
				path, auth, idem, accept, ct string
				body                         map[string]any
			}
			srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.path, got.auth = r.URL.Path+"?"+r.URL.RawQuery, r.Header.Get("Authorization")
				got.idem, got.accept, got.ct = r.Header.Get("Idempotency-Key"), r.Header.Get("Accept"), r.Header.Get("Content-Type")
				b, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(b, &got.body)
				sw := startStream(w, "text/event-stream")
				sw.data(oaText("hi"))
				sw.raw("data: [DONE]\n\n")
			}))
			s := newTestSeat(t, "openai", srv.URL, func(c *Config) {
				c.Model, c.MaxTokensParam = tt.model, tt.override
				c.BaseURL = srv.URL + "/v1/?api-version=2024-10-21"
			})
			obs := do(t, s, 2*time.Second, Request{MaxTokens: 77, IdempotencyKey: "job-42", Prompt: "ping"})
			require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
			assert.Equal(t, "/v1/chat/completions?api-version=2024-10-21", got.path)
			assert.Equal(t, "Bearer "+testKey, got.auth)
			assert.Equal(t, "job-42", got.idem)
			assert.Equal(t, "text/event-stream", got.accept)
			assert.Equal(t, "application/json", got.ct)
			assert.Equal(t, tt.model, got.body["model"])
			assert.Equal(t, true, got.body["stream"])
			assert.Equal(t, map[string]any{"include_usage": true}, got.body["stream_options"])
			assert.Equal(t, float64(77), got.body[tt.wantParam])
			other := map[string]string{"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}[tt.wantParam]
			assert.NotContains(t, got.body, other)
			assert.Equal(t, []any{map[string]any{"role": "user", "content": "ping"}}, got.body["messages"])
		})
	}
}

func TestOpenAIWaitIgnoresRoleOnlyAndEmptyChunks(t *testing.T) {
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sw := startStream(w, "text/event-stream")
		sw.data(oaDelta(`{"role":"assistant"}`))
		sleepUntil(t0, 40*time.Millisecond)
		sw.data(oaDelta(`{"content":""}`))
		sleepUntil(t0, 80*time.Millisecond)
		sw.data(oaDelta(`{"content":null}`))
		sw.raw(": keep-alive comment\n\n")
		sleepUntil(t0, 150*time.Millisecond)
		sw.data(oaText("first"))
		sw.data(oaUsage(3, 1))
		sw.raw("data: [DONE]\n\n")
	}))
	obs := do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{})
	require.Equal(t, admit.OK, obs.Outcome)
	require.True(t, obs.HasWait)
	logTiming(t, "openai", "wait-after-role-only", 150*time.Millisecond, obs.Wait)
	requireTimed(t, 150*time.Millisecond, obs.Wait, "wait")
	// The headers came at once and the first token 150 ms later, on one
	// connection: ttfb is the headers', not the token's (were it the
	// token's it would equal wait). An order, not a clock: load delays
	// both reads, never the headers past the token behind them.
	require.True(t, obs.HasTTFB)
	assert.Less(t, obs.TTFB, obs.Wait, "ttfb is the headers', before the first token")
}

func TestOpenAIChoicesNullOrEmptyTolerated(t *testing.T) {
	srv := loopback(t, sseHandler(0,
		data(`{"id":"c","object":"chat.completion.chunk","choices":null}`),
		data(`{"id":"c","object":"chat.completion.chunk","choices":[]}`),
		data(`{"id":"c","object":"chat.completion.chunk"}`),
		data(oaText("ok")),
		data(`{"id":"c","object":"chat.completion.chunk","choices":null,"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`),
		"data: [DONE]\n\n",
	))
	obs := do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.Equal(t, int64(9), obs.PromptTokens)
	assert.Equal(t, int64(2), obs.CompletionTokens)
	assert.Equal(t, FromUsage, obs.TokensFrom)
}

func TestOpenAIUsageFromFinalChunk(t *testing.T) {
	srv := loopback(t, sseHandler(5*time.Millisecond,
		data(oaDelta(`{"role":"assistant","content":""}`)),
		data(oaText("one")), data(oaText(" two")), data(oaText(" three")),
		data(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`),
		data(oaUsage(1234, 567)),
		"data: [DONE]\n\n",
	))
	obs := do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{})
	require.Equal(t, admit.OK, obs.Outcome)
	assert.Equal(t, int64(1234), obs.PromptTokens)
	assert.Equal(t, int64(567), obs.CompletionTokens)
	assert.Equal(t, int64(1801), obs.Tokens())
	assert.Equal(t, FromUsage, obs.TokensFrom)
}

func TestOpenAIReasoningIsFirstToken(t *testing.T) {
	for _, field := range []string{"reasoning_content", "reasoning"} {
		t.Run(field, func(t *testing.T) {
			srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				t0 := time.Now()
				sw := startStream(w, "text/event-stream")
				sw.data(oaDelta(`{"role":"assistant","content":""}`))
				sleepUntil(t0, 60*time.Millisecond)
				sw.data(oaDelta(`{"` + field + `":"Let me think"}`))
				sleepUntil(t0, 160*time.Millisecond)
				sw.data(oaText("Answer"))
				sw.raw("data: [DONE]\n\n")
			}))
			obs := do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{})
			require.Equal(t, admit.OK, obs.Outcome)
			requireTimed(t, 60*time.Millisecond, obs.Wait, "wait")
		})
	}
}

// TestTokenizerFallback: no usage in the answer → both counts from the
// local tokenizer, tokens_from=tokenizer.
func TestTokenizerFallback(t *testing.T) {
	const prompt = "Write one short sentence about retries."
	pieces := []string{"Retries", " are", " not", " free", ";", " they", " cost", " time", "."}
	codec, err := codecFor("gpt-4o-mini", "")
	require.NoError(t, err)
	wantCompletion := countTokens(codec, strings.Join(pieces, ""))
	wantPrompt := countTokens(codec, prompt)

	frames := []string{data(oaDelta(`{"role":"assistant","content":""}`))}
	for _, p := range pieces {
		frames = append(frames, data(oaText(p)))
	}
	srv := loopback(t, sseHandler(0, append(frames, "data: [DONE]\n\n")...))
	obs := do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{Prompt: prompt})
	require.Equal(t, admit.OK, obs.Outcome)
	assert.Equal(t, FromTokenizer, obs.TokensFrom)
	assert.Equal(t, wantPrompt, obs.PromptTokens)
	assert.Equal(t, wantCompletion, obs.CompletionTokens)
	assert.Positive(t, obs.CompletionTokens)

	// The seat's encoding override changes the count's encoding.
	obs = do(t, newTestSeat(t, "openai", srv.URL, func(c *Config) { c.Encoding = "r50k_base" }), 2*time.Second, Request{Prompt: prompt})
	r50k, err := codecFor("", "r50k_base")
	require.NoError(t, err)
	assert.Equal(t, countTokens(r50k, strings.Join(pieces, "")), obs.CompletionTokens)
}

func TestOpenAINonStreamedJSONAnswer(t *testing.T) {
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	}))
	obs := do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.True(t, obs.HasWait)
	assert.Equal(t, int64(5), obs.PromptTokens)
	assert.Equal(t, int64(1), obs.CompletionTokens)
}
