package seat

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// timingShape is a scripted answer: headers at ttfb, a content-free first
// frame right after them, first content at wait, the last byte at elapsed.
type timingShape struct {
	ttfb, wait, elapsed time.Duration
}

// timedHandler plays shape in one wire format, with real delays measured
// from the moment the handler starts.
func timedHandler(kind string, shape timingShape) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sleepUntil(t0, shape.ttfb)
		switch kind {
		case "openai":
			sw := startStream(w, "text/event-stream")
			sw.data(oaDelta(`{"role":"assistant","content":""}`)) // role only: not the wait
			sleepUntil(t0, shape.wait)
			sw.data(oaText("Hello"))
			for i := 1; i <= 3; i++ {
				sleepUntil(t0, shape.wait+(shape.elapsed-shape.wait)*time.Duration(i)/4)
				sw.data(oaText(" there"))
			}
			sleepUntil(t0, shape.elapsed)
			sw.data(oaUsage(12, 4))
			sw.raw("data: [DONE]\n\n")
		case "anthropic":
			sw := startStream(w, "text/event-stream")
			sw.event("message_start", `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":12,"output_tokens":1}}}`)
			sw.event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			sw.event("ping", `{"type":"ping"}`)
			sleepUntil(t0, shape.wait)
			sw.event("content_block_delta", anText("Hello"))
			for i := 1; i <= 3; i++ {
				sleepUntil(t0, shape.wait+(shape.elapsed-shape.wait)*time.Duration(i)/4)
				sw.event("content_block_delta", anText(" there"))
			}
			sleepUntil(t0, shape.elapsed)
			sw.event("content_block_stop", `{"type":"content_block_stop","index":0}`)
			sw.event("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":4}}`)
			sw.event("message_stop", `{"type":"message_stop"}`)
		case "ollama":
			sw := startStream(w, "application/x-ndjson")
			sw.line(olText("")) // empty content: not the wait
			sleepUntil(t0, shape.wait)
			sw.line(olText("Hello"))
			for i := 1; i <= 3; i++ {
				sleepUntil(t0, shape.wait+(shape.elapsed-shape.wait)*time.Duration(i)/4)
				sw.line(olText(" there"))
			}
			sleepUntil(t0, shape.elapsed)
			sw.line(`{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":12,"eval_count":4}`)
		}
	}
}

// TestTiming: against scripted delays of 50–300 ms on loopback, ttfb,
// wait and elapsed land within a generous bound (the measured error is
// logged as TIMING lines; the bound only keeps CI honest, not fast).
// Serial on purpose: parallel attempts would time each other's
// scheduling, not the seat. On a shared, overloaded machine a goroutine
// can wake 100 ms late now and then, so a shape gets up to three tries
// and must land in bounds once; a real measuring error is systematic and
// fails all three. Every try is logged.
func TestTiming(t *testing.T) {
	shapes := []timingShape{
		{ttfb: 50 * time.Millisecond, wait: 120 * time.Millisecond, elapsed: 200 * time.Millisecond},
		{ttfb: 100 * time.Millisecond, wait: 100 * time.Millisecond, elapsed: 300 * time.Millisecond},
		{ttfb: 60 * time.Millisecond, wait: 250 * time.Millisecond, elapsed: 300 * time.Millisecond},
	}
	inBounds := func(want, got time.Duration) bool { return got >= want-earlyTol && got <= want+lateTol }
	for _, kind := range []string{"openai", "anthropic", "ollama"} {
		for i, shape := range shapes {
			t.Run(fmt.Sprintf("%s/%d", kind, i), func(t *testing.T) {
				srv := loopback(t, timedHandler(kind, shape))
				s := newTestSeat(t, kind, srv.URL)
				var obs Observation
				for try := 1; try <= 3; try++ {
					obs = do(t, s, 5*time.Second, Request{MaxTokens: 16})
					require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
					require.True(t, obs.HasTTFB)
					require.True(t, obs.HasWait)
					logTiming(t, kind, "ttfb", shape.ttfb, obs.TTFB)
					logTiming(t, kind, "wait", shape.wait, obs.Wait)
					logTiming(t, kind, "elapsed", shape.elapsed, obs.Elapsed)
					if inBounds(shape.ttfb, obs.TTFB) && inBounds(shape.wait, obs.Wait) && inBounds(shape.elapsed, obs.Elapsed) {
						break
					}
					t.Logf("try %d out of bounds; trying again", try)
				}
				requireTimed(t, shape.ttfb, obs.TTFB, "ttfb")
				requireTimed(t, shape.wait, obs.Wait, "wait")
				requireTimed(t, shape.elapsed, obs.Elapsed, "elapsed")
				require.Equal(t, int64(12), obs.PromptTokens)
				require.Equal(t, int64(4), obs.CompletionTokens)
				require.Equal(t, FromUsage, obs.TokensFrom)
				require.Equal(t, http.StatusOK, obs.HTTPStatus)
				require.Equal(t, admit.Billable, obs.Billing)
				require.Positive(t, obs.Bytes)
			})
		}
	}
}
