package proxy

import (
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// failing is a provider on 127.0.0.1 that answers every request 500;
// calls counts them.
func failing(t *testing.T) (base string, calls *atomic.Int32) {
	t.Helper()
	calls = new(atomic.Int32)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(500)
		_, _ = io.WriteString(w, `{"error":{"message":"boom","type":"server_error"}}`)
	})
	srv := &http.Server{Handler: mux}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/v1", calls
}

// In shadow mode every request goes out once and its client gets the
// provider's answer as it came (no retry inside the request, no
// x-should-retry of the proxy's, no refusal), while each row says what
// the policy would have done: retry the first failure, admit the second
// (the cap then ends the job), refuse the client's third try.
func TestShadowForwardsOnceAndSaysWhatThePolicyWould(t *testing.T) {
	base, calls := failing(t)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) { o.Shadow = true })
	for i := range 3 {
		resp, body := post(t, px.url+"/v1/chat/completions", chatBody, headerJob, "j", headerRetryCount, strconv.Itoa(i))
		assert.Equal(t, 500, resp.StatusCode)
		assert.Equal(t, `{"error":{"message":"boom","type":"server_error"}}`, body)
		assert.Equal(t, "yes", resp.Header.Get("X-Upstream"))
		assert.Empty(t, resp.Header.Get("X-Should-Retry"), "the client's own retry layer decides")
		assert.EqualValues(t, i+1, calls.Load(), "one forward per request: %s", px.rows.text())
	}
	rs := px.done(t, "j")
	require.Len(t, rs, 3, px.rows.text())
	for i, r := range rs {
		assert.Equal(t, i+1, r.Attempt)
		assert.Equal(t, "admit", r.Decision, "the row's own decision is the pass-through's")
		assert.Equal(t, admit.ServerError, r.Outcome)
	}
	assert.Equal(t, []string{"retry", "admit", "refuse: attempt cap"}, []string{rs[0].Would, rs[1].Would, rs[2].Would})
}

// With a fallback seat, the failure the policy would send on is
// would=fallback, and so is the job's next request (enforcing, it would
// go to the fallback seat); both still went to the first seat.
func TestShadowFallback(t *testing.T) {
	base, calls := failing(t)
	other, otherCalls := failing(t)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base), seatCfg("f", "openai", other)}, func(o *Options) { o.Shadow = true })
	for range 2 {
		resp, _ := post(t, px.url+"/v1/chat/completions", chatBody, headerJob, "k")
		assert.Equal(t, 500, resp.StatusCode)
	}
	rs := px.done(t, "k")
	require.Len(t, rs, 2)
	assert.Equal(t, []string{"fallback", "fallback"}, []string{rs[0].Would, rs[1].Would})
	assert.Equal(t, []string{"s", "s"}, []string{rs[0].Seat, rs[1].Seat})
	assert.EqualValues(t, 2, calls.Load())
	assert.Zero(t, otherCalls.Load(), "nothing goes to the fallback seat")
}

// slow is a provider on 127.0.0.1 that answers every request 200, whole,
// after a model's time to answer of late.
func slow(t *testing.T, late time.Duration) string {
	t.Helper()
	ln := listen(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(late) // the model taking its time: a real delay on loopback
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, chatAnswer)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/v1"
}

// A forward that ran past the wait cap (a first-token deadline) or the
// hard timeout is one enforcing would have cut: the machine takes the
// cut, and would= says what the live proxy does after it (a wait-cap cut
// retried on its seat; a timeout sent on to the fallback seat), while
// the row, and the client's answer, stay the pass-through's.
func TestShadowJudgesTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name          string
		maxWait, hard time.Duration
		seats         int
		want          string
	}{
		{"wait cap, one seat", 20 * ms, 5 * time.Second, 1, ledgerfile.WouldRetry},
		{"wait cap, a fallback", 20 * ms, 5 * time.Second, 2, ledgerfile.WouldFallback},
		{"hard timeout, a fallback", 5 * time.Second, 20 * ms, 2, ledgerfile.WouldFallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := testPolicy()
			pol.Budget.MaxWait, pol.Timeouts.Hard = tc.maxWait, tc.hard
			pol.Breaker = admit.BreakerConfig{}
			base := slow(t, 100*ms)
			chain := []seat.Config{seatCfg("s", "openai", base), seatCfg("f", "openai", base)}[:tc.seats]
			px := start(t, pol, chain, func(o *Options) { o.Shadow = true })
			resp, body := post(t, px.url+"/v1/chat/completions", chatBody, headerJob, "j")
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, chatAnswer, body, "the client gets the answer as it came")
			rs := px.done(t, "j")
			require.Len(t, rs, 1, px.rows.text())
			assert.Equal(t, admit.OK, rs[0].Outcome, "the row is the pass-through's")
			assert.Equal(t, "admit", rs[0].Decision)
			assert.Equal(t, tc.want, rs[0].Would, px.rows.text())

			// Enforcing, the live proxy makes that move.
			live := start(t, pol, chain)
			_, _ = post(t, live.url+"/v1/chat/completions", chatBody, headerJob, "j")
			ls := live.done(t, "j")
			require.GreaterOrEqual(t, len(ls), 2, live.rows.text())
			assert.Contains(t, []admit.Outcome{admit.WaitCap, admit.Timeout}, ls[0].Outcome)
			next := map[string]string{ledgerfile.WouldRetry: "s", ledgerfile.WouldFallback: "f"}[tc.want]
			assert.Equal(t, next, ls[1].Seat, live.rows.text())
		})
	}
}
