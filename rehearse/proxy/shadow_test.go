package proxy

import (
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
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
