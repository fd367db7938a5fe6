package seat

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// Usage reported in parts is merged by field: a later, partial running
// total never lowers a count an earlier event set. The Anthropic row
// read prompt_tokens=900 beside cache_write_tokens=3000 (cost 0.00069
// where 0.00454 is right); a message_delta's input_tokens 0 zeroed the
// prompt.
func TestUsageMergedByField(t *testing.T) {
	start := "event: message_start\n" + data(`{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","content":[],"usage":{"input_tokens":1000,"cache_creation_input_tokens":3000,"cache_read_input_tokens":0,"output_tokens":1}}}`)
	text := "event: content_block_delta\n" + data(anText("Hello"))
	stop := "event: message_stop\n" + data(`{"type":"message_stop"}`)
	for _, tc := range []struct {
		name  string
		delta string
	}{
		{"partial cumulative delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":900,"output_tokens":42}}`},
		{"input_tokens 0 in the delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"output_tokens":42}}`},
		{"output only", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":42}}`},
	} {
		t.Run("anthropic/"+tc.name, func(t *testing.T) {
			srv := loopback(t, sseHandler(0, start, text, "event: message_delta\n"+data(tc.delta), stop))
			s := newTestSeat(t, "anthropic", srv.URL, func(c *Config) {
				c.PriceIn, c.PriceOut = 1, 5
			})
			obs := do(t, s, 2*time.Second, Request{})
			requireParts(t, parts{4000, 42, 0, 3000, -1}, obs)
		})
	}
	t.Run("openai/a later partial usage chunk", func(t *testing.T) {
		srv := loopback(t, sseHandler(0,
			data(`{"choices":[{"index":0,"delta":{"content":"Hi"}}],"usage":{"prompt_tokens":4000,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":3000}}}`),
			data(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":0,"completion_tokens":42,"prompt_tokens_details":{"cached_tokens":0}}}`),
			"data: [DONE]\n\n"))
		requireParts(t, parts{4000, 42, 3000, -1, -1}, do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{}))
	})
}

// A stream is whole only when it said it ended: a chat stream's finish
// reason or [DONE], Anthropic's stop_reason or message_stop, Ollama's
// done: true, the Responses API's terminal event. One that carried
// something and then ended cleanly without saying so was cut: reset,
// billable, never ok. (A stream that stalled and then ended with no
// finish reason, no usage and no [DONE] was logged ok, its 20 words
// looking like a finished answer.)
func TestStreamWholeness(t *testing.T) {
	anStart := "event: message_start\n" + data(`{"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":1}}}`)
	type tc struct {
		name string
		kind string
		api  string
		h    http.HandlerFunc
		want admit.Outcome
	}
	cases := []tc{
		{"chat: stalled, then a clean end with nothing", "openai", "", func(w http.ResponseWriter, r *http.Request) {
			sw := startStream(w, "text/event-stream")
			for range 20 {
				sw.data(oaText(" word"))
			}
			time.Sleep(50 * time.Millisecond)
		}, admit.Reset},
		{"chat: usage but no finish reason nor [DONE]", "openai", "", sseHandler(0, data(oaText("Hi")), data(oaUsage(5, 1))), admit.Reset},
		{"chat: a finish reason, no [DONE]", "openai", "", sseHandler(0, data(oaText("Hi")),
			data(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)), admit.OK},
		{"chat: [DONE], no finish reason", "openai", "", sseHandler(0, data(oaText("Hi")), "data: [DONE]\n\n"), admit.OK},
		{"anthropic: neither stop_reason nor message_stop", "anthropic", "", sseHandler(0, anStart,
			"event: content_block_delta\n"+data(anText("Hi")),
			"event: message_delta\n"+data(`{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":3}}`)), admit.Reset},
		{"anthropic: stop_reason, no message_stop", "anthropic", "", sseHandler(0, anStart,
			"event: content_block_delta\n"+data(anText("Hi")),
			"event: message_delta\n"+data(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`)), admit.OK},
		{"ollama: no done: true", "ollama", "", func(w http.ResponseWriter, r *http.Request) {
			sw := startStream(w, "application/x-ndjson")
			sw.line(olText("Hi"))
			sw.line(olText(" there"))
		}, admit.Reset},
	}
	// The Responses API: no terminal event, or one whose type or shape
	// is wrong (the official SDKs raise on such a stream).
	resp := func(last ...string) http.HandlerFunc {
		frames := append(respPreamble(), respDelta(4, "response.output_text.delta", "Hi"), respDelta(5, "response.output_text.delta", " there"))
		return sseHandler(0, append(frames, last...)...)
	}
	cases = append(cases,
		tc{"responses: no terminal event", "openai", APIResponses, resp(), admit.Reset},
		tc{"responses: output done, then the end", "openai", APIResponses,
			resp(respEvent(6, "response.output_text.done", `"item_id":"msg_1","output_index":1,"content_index":0,"text":"Hi there"`)), admit.Reset},
		tc{"responses: completed whose response is not an object", "openai", APIResponses,
			resp(respEvent(6, "response.completed", `"response":"done"`)), admit.Reset},
		tc{"responses: completed whose status is in_progress", "openai", APIResponses,
			resp(respEvent(6, "response.completed", `"response":`+respObject("in_progress", respUsage))), admit.Reset},
		tc{"responses: an event named completed whose data is another type", "openai", APIResponses,
			resp("event: response.completed\n" + data(`{"type":"response.in_progress","sequence_number":6,"response":`+respObject("in_progress", "")+`}`)), admit.Reset},
		tc{"responses: completed", "openai", APIResponses,
			resp(respEvent(6, "response.completed", `"response":`+respObject("completed", respUsage))), admit.OK},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := loopback(t, c.h)
			s := newTestSeat(t, c.kind, srv.URL, func(cfg *Config) { cfg.API = c.api })
			obs := do(t, s, 2*time.Second, Request{})
			require.Equal(t, c.want, obs.Outcome, obs.Detail)
			assert.Equal(t, admit.Billable, obs.Billing)
			assert.True(t, obs.HasWait)
			if c.want == admit.Reset {
				assert.Contains(t, obs.Detail, "ended before the answer said it ended")
				assert.Positive(t, obs.CompletionTokens, "what was seen is charged")
			}
		})
	}
}

// A stall: no byte for the stall window after the answer began cuts the
// attempt, outcome reset, billable for what it sent; a stream whose
// chunks keep coming inside the window is not cut, and the window does
// not run before the answer begins (the wait cap's job).
func TestStallWindow(t *testing.T) {
	const stall = 150 * time.Millisecond
	for _, kind := range []string{"openai", "anthropic", "ollama"} {
		t.Run(kind+"/stalls", func(t *testing.T) {
			resumed := make(chan time.Time, 1)
			srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ct, frame := firstFrame(kind)
				sw := startStream(w, ct)
				sw.raw(frame)
				select {
				case <-r.Context().Done():
				case <-time.After(2 * time.Second):
					resumed <- time.Now()
					sw.raw(frame)
				}
			}))
			obs := do(t, newTestSeat(t, kind, srv.URL), 5*time.Second, Request{Stall: stall})
			require.Equal(t, admit.Reset, obs.Outcome, obs.Detail)
			assert.Equal(t, "stalled: no byte for 150ms mid-stream", obs.Detail)
			assert.Equal(t, admit.Billable, obs.Billing)
			assert.Equal(t, FromEstimate, obs.TokensFrom)
			assert.Positive(t, obs.CompletionTokens)
			assert.Empty(t, resumed, "the attempt waited for the server to send again")
			assert.GreaterOrEqual(t, obs.Elapsed, obs.Wait+stall)
		})
	}
	t.Run("chunks inside the window", func(t *testing.T) {
		srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sw := startStream(w, "text/event-stream")
			time.Sleep(2 * stall) // before the answer begins: not a stall
			for range 10 {
				sw.data(oaText(" word"))
				time.Sleep(stall / 10)
			}
			sw.raw("data: [DONE]\n\n")
		}))
		obs := do(t, newTestSeat(t, "openai", srv.URL), 5*time.Second, Request{Stall: 4 * stall})
		require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	})
}

// The soft timeout's note means no content yet, and nothing else: it
// fired on every attempt longer than it, even while content had been
// streaming since long before.
func TestSoftTimeoutOnlyBeforeContent(t *testing.T) {
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := startStream(w, "text/event-stream")
		for range 15 {
			sw.data(oaText(" word"))
			time.Sleep(20 * time.Millisecond)
		}
		sw.raw("data: [DONE]\n\n")
	}))
	var calls atomic.Int32
	obs := do(t, newTestSeat(t, "openai", srv.URL), 5*time.Second, Request{
		SoftTimeout: 100 * time.Millisecond,
		OnSoft:      func(time.Duration) { calls.Add(1) },
	})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	require.Greater(t, obs.Elapsed, 200*time.Millisecond)
	assert.Zero(t, calls.Load(), "still waiting, while content streamed")
}
