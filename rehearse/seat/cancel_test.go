package seat

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// firstFrame is a frame that carries content, per wire format.
func firstFrame(kind string) (contentType, frame string) {
	switch kind {
	case "anthropic":
		return "text/event-stream", "event: content_block_delta\n" + data(anText("partial"))
	case "ollama":
		return "application/x-ndjson", olText("partial") + "\n"
	}
	return "text/event-stream", data(oaText("partial"))
}

// TestCancellation: the hard timeout and the wait cap cancel the request
// for real: Do returns within +100 ms of the limit with the right outcome,
// and the server sees its request's context end within 100 ms of it. The
// hard timeout is the caller's context deadline (Do) or DoWithin's (as
// rehearse sends): the same observation either way.
func TestCancellation(t *testing.T) {
	const hard = 400 * time.Millisecond
	slack := cancelSlack
	tests := []struct {
		name     string
		waitCap  time.Duration
		content  bool // a content frame comes at once, then silence
		headers  bool // 200 headers at once, then silence
		want     admit.Outcome
		wantWait bool
		limit    time.Duration
	}{
		{name: "hard timeout before headers", want: admit.Timeout, limit: hard},
		{name: "hard timeout after headers", headers: true, want: admit.Timeout, limit: hard},
		{name: "hard timeout mid-stream", headers: true, content: true, want: admit.Timeout, wantWait: true, limit: hard},
		{name: "wait cap before headers", waitCap: 150 * time.Millisecond, want: admit.WaitCap, limit: 150 * time.Millisecond},
		{name: "wait cap after bare headers", headers: true, waitCap: 150 * time.Millisecond, want: admit.WaitCap, limit: 150 * time.Millisecond},
		{name: "wait cap disarmed by content", headers: true, content: true, waitCap: 150 * time.Millisecond, want: admit.Timeout, wantWait: true, limit: hard},
	}
	for _, kind := range []string{"openai", "anthropic", "ollama"} {
		for _, tt := range tests {
			for _, within := range []bool{false, true} {
				how := "deadline"
				if within {
					how = "DoWithin"
				}
				t.Run(kind+"/"+tt.name+"/"+how, func(t *testing.T) {
					watch := newCancelWatch()
					srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if tt.headers {
							ct, frame := firstFrame(kind)
							sw := startStream(w, ct)
							if tt.content {
								sw.raw(frame)
							}
						}
						watch.hold(r)
					}))
					s := newTestSeat(t, kind, srv.URL)
					start := time.Now()
					var obs Observation
					if within {
						obs = DoWithin(context.Background(), s, Request{Prompt: "Say hello in five words.", WaitCap: tt.waitCap}, hard)
					} else {
						obs = do(t, s, hard, Request{WaitCap: tt.waitCap})
					}
					returned := time.Since(start)
					seen := watch.wait(t).Sub(start)

					assert.Equal(t, tt.want, obs.Outcome, obs.Detail)
					if tt.want == admit.Timeout {
						assert.Contains(t, obs.Detail, "hard timeout")
					}
					assert.Equal(t, admit.Ambiguous, obs.Billing)
					assert.Equal(t, tt.wantWait, obs.HasWait)
					assert.Equal(t, tt.headers, obs.HasTTFB)
					t.Logf("CANCEL kind=%s case=%q limit_ms=%.0f returned_ms=%.3f server_saw_ms=%.3f", kind, tt.name, ms(tt.limit), ms(returned), ms(seen))
					assert.GreaterOrEqual(t, returned, tt.limit)
					assert.Less(t, returned, tt.limit+slack, "Do returned late")
					assert.Less(t, seen, tt.limit+slack, "the server saw the cancellation late")
					// Elapsed starts inside Do, a moment after the deadline was set.
					assert.GreaterOrEqual(t, obs.Elapsed, tt.limit-lateTol)
					assert.Less(t, obs.Elapsed, tt.limit+slack)
					if tt.content {
						assert.Equal(t, FromEstimate, obs.TokensFrom)
						assert.Positive(t, obs.CompletionTokens, "output so far is counted")
					}
				})
			}
		}
	}
}

// TestSoftTimeout: OnSoft is called once when the soft timeout passes,
// and the attempt carries on to its end.
func TestSoftTimeout(t *testing.T) {
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sw := startStream(w, "text/event-stream")
		sleepUntil(t0, 200*time.Millisecond)
		sw.data(oaText("late but fine"))
		sw.raw("data: [DONE]\n\n")
	}))
	var calls atomic.Int32
	var at atomic.Int64
	obs := do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{
		SoftTimeout: 80 * time.Millisecond,
		OnSoft: func(elapsed time.Duration) {
			calls.Add(1)
			at.Store(int64(elapsed))
		},
	})
	require.Equal(t, admit.OK, obs.Outcome)
	assert.Equal(t, int32(1), calls.Load())
	requireTimed(t, 80*time.Millisecond, time.Duration(at.Load()), "soft")
	requireTimed(t, 200*time.Millisecond, obs.Wait, "wait")

	// An attempt that ends first never calls it, not even later.
	calls.Store(0)
	fast := loopback(t, sseHandler(0, data(oaText("quick")), "data: [DONE]\n\n"))
	obs = do(t, newTestSeat(t, "openai", fast.URL), 2*time.Second, Request{
		SoftTimeout: 100 * time.Millisecond,
		OnSoft:      func(time.Duration) { calls.Add(1) },
	})
	require.Equal(t, admit.OK, obs.Outcome)
	time.Sleep(150 * time.Millisecond) // real time must pass to prove a negative
	assert.Zero(t, calls.Load())
}

// TestOperatorCancel: the caller cancelling the context (Ctrl-C) is
// cancelled, not a timeout.
func TestOperatorCancel(t *testing.T) {
	watch := newCancelWatch()
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { watch.hold(r) }))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	obs := newTestSeat(t, "openai", srv.URL).Do(ctx, Request{Prompt: "x"})
	watch.wait(t)
	assert.Equal(t, admit.Cancelled, obs.Outcome)
	assert.Equal(t, admit.Ambiguous, obs.Billing)
}
