package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

const openaiStream = `{"model":"m1","messages":[{"role":"user","content":"PROMPT-CANARY hi"}],"stream":true,"stream_options":{"include_usage":true}}`

var kinds = []struct {
	kind   string
	format seatserver.Format
	path   string
	body   string
}{
	{"openai", seatserver.OpenAI, "/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"PROMPT-CANARY hi"}]}`},
	{"anthropic", seatserver.Anthropic, "/v1/messages", `{"model":"m1","max_tokens":64,"messages":[{"role":"user","content":"PROMPT-CANARY hi"}]}`},
	{"ollama", seatserver.Ollama, "/api/chat", `{"model":"m1","stream":false,"messages":[{"role":"user","content":"PROMPT-CANARY hi"}]}`},
}

// Streamed bytes are the same with and without the proxy in between.
func TestStreamBytesIdentical(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.kind, func(t *testing.T) {
			body := strings.Replace(k.body, `"stream":false`, `"stream":true`, 1)
			if k.kind == "openai" {
				body = openaiStream
			} else if k.kind == "anthropic" {
				body = strings.Replace(body, `"max_tokens":64`, `"max_tokens":64,"stream":true`, 1)
			}
			direct, _ := upstreamAt(t, k.format, okPlan)
			viaBase, _ := upstreamAt(t, k.format, okPlan)
			px := start(t, testPolicy(), []seat.Config{seatCfg("s", k.kind, viaBase)})
			origin := func(base string) string { return strings.TrimSuffix(base, "/v1") }
			_, want := post(t, origin(direct)+k.path, body)
			resp, got := post(t, px.url+k.path, body)
			require.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, want, got)
			rs := px.rows.wait(t, 1)
			require.Len(t, rs, 1)
			r := rs[0]
			assert.Equal(t, admit.OK, r.Outcome)
			assert.Equal(t, "usage", r.TokensFrom)
			assert.Equal(t, int64(20), r.Tokens)
			assert.Equal(t, "succeeded", r.JobEnd)
			assert.True(t, r.HasTTFB)
			assert.Greater(t, r.Wait, time.Duration(0))
			assert.GreaterOrEqual(t, r.Elapsed, r.Wait)
		})
	}
}

// A streaming OpenAI request that did not ask for usage is sent asking
// for it: the row's tokens come from usage, and the client sees the
// usage chunk.
func TestStreamAsksForUsage(t *testing.T) {
	base, _ := upstreamAt(t, seatserver.OpenAI, okPlan)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	_, got := post(t, px.url+"/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	assert.Contains(t, got, `"completion_tokens":8`)
	rs := px.rows.wait(t, 1)
	assert.Equal(t, "usage", rs[0].TokensFrom)
	assert.Equal(t, "p7-1", rs[0].Job, "a request naming no job is a job of its own")
}

// A persistent 500: the proxy retries it to the attempt cap inside the
// request, and the client gets the provider's last answer as it came,
// told not to retry (x-should-retry: false); the refusal that ends the
// job is its row. A client retry that comes anyway is judged on the
// job's books: 503 in the provider's own error shape, with the reason,
// x-should-retry: false and no Retry-After, and one more row.
func TestAttemptCapShapes(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.kind, func(t *testing.T) {
			base, srv := upstreamAt(t, k.format, seat.Plan{Status: 500, Elapsed: 5 * ms})
			px := start(t, testPolicy(), []seat.Config{seatCfg("s", k.kind, base)})
			resp, _ := post(t, px.url+k.path, k.body, "Idempotency-Key", "job-a", "X-Stainless-Retry-Count", "0")
			require.Equal(t, 500, resp.StatusCode, "the provider's last answer")
			assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
			assert.Equal(t, 2, srv.Total(), "retried to the cap inside the request")
			resp, body := post(t, px.url+k.path, k.body, "Idempotency-Key", "job-a", "X-Stainless-Retry-Count", "1")
			require.Equal(t, 503, resp.StatusCode)
			assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
			assert.Empty(t, resp.Header.Get("Retry-After"))
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &v))
			msg := "retrygate: refuse: attempt cap for job job-a: the job used 2 of 2 attempts"
			switch k.kind {
			case "openai":
				assert.Equal(t, msg, v["error"].(map[string]any)["message"])
				assert.Equal(t, "attempt_cap", v["error"].(map[string]any)["code"])
			case "anthropic":
				assert.Equal(t, "error", v["type"])
				assert.Equal(t, msg, v["error"].(map[string]any)["message"])
			case "ollama":
				assert.Equal(t, msg, v["error"])
			}
			assert.Equal(t, 2, srv.Total(), "the refusal never reached the provider")
			// Two sent and the refusal that ended the first request, then
			// the client's retry, refused: one more row of the job.
			rs := px.rows.wait(t, 4)
			require.Len(t, rs, 4)
			assert.Equal(t, []string{"admit", "admit", "refuse: attempt cap", "refuse: attempt cap"}, column(rs, func(r ledgerfile.Row) string { return r.Decision }))
			for _, r := range rs {
				assert.Empty(t, r.JobEnd, "a named job's client may send again: a reader ends it")
			}
			assert.Equal(t, []string{"0", "0", "0", "1"}, column(rs, func(r ledgerfile.Row) string { return extra(r, KeyClientRetry) }))
			assert.Equal(t, 4, rs[3].Attempt)
		})
	}
}

func extra(r ledgerfile.Row, key string) string {
	for _, kv := range r.Extra {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}

// The deadline is made at the job's first request; once it is gone the
// job gets 504, whatever its attempts. The first request's client gives
// up while the proxy waits out a 429's Retry-After (the row that ends
// it says so); it comes back after the deadline.
func TestDeadlineGone504(t *testing.T) {
	base, srv := upstreamAt(t, seatserver.OpenAI, seat.Plan{Status: 429, Elapsed: 5 * ms, RetryAfter: 3 * time.Second, HasRetryAfter: true})
	pol := testPolicy()
	pol.Budget.MaxAttempts = 5
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
	req, err := http.NewRequest(http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(kinds[0].body))
	require.NoError(t, err)
	req.Header.Set("X-Retrygate-Job", "slow")
	_, err = (&http.Client{Timeout: 300 * ms}).Do(req)
	require.Error(t, err, "the client gave up during the proxy's wait")
	rs := px.done(t, "slow")
	require.Len(t, rs, 2)
	assert.Equal(t, "refuse: cancelled", rs[1].Decision)
	px.clock.Advance(11 * time.Second)
	resp, body := post(t, px.url+"/v1/chat/completions", kinds[0].body, "X-Retrygate-Job", "slow")
	assert.Equal(t, 504, resp.StatusCode)
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Contains(t, body, "refuse: deadline for job slow: the job's 10s deadline is gone")
	assert.Equal(t, 1, srv.Total())
	rs = px.rows.wait(t, 3)
	require.Len(t, rs, 3)
	assert.Equal(t, "refuse: deadline", rs[2].Decision)
	// The client's time between its requests is the row's delay: spent + delay
	// is the time since the job's first request.
	assert.GreaterOrEqual(t, rs[2].SpentS+rs[2].Delay, 11*time.Second)
	px.stop()
	assertReplaysUnchanged(t, pol, px.rows.all())
}

// Hostile upstreams: a hang, an endless stream and a reset give a bounded
// answer and rows, never a stuck client. A hang before the answer's
// headers is retried (a timeout, once) and then answered 504; a stream
// that began is cut, and its client's connection with it.
func TestHostileUpstreams(t *testing.T) {
	pol := testPolicy()
	pol.Timeouts.Hard = time.Second // headers in 5ms even on a loaded machine
	pol.Budget.MaxWait = 5 * time.Second
	pol.Retry.BaseDelay = 10 * ms
	tests := []struct {
		name     string
		plan     seat.Plan
		status   int // 0: the stream is cut after its headers
		outcomes []string
		end      string
	}{
		{"hang before headers", seat.Plan{Hang: true, TTFB: time.Hour}, 504, []string{"timeout", "timeout", "refuse: retry limit"}, "unknown"},
		{"endless stream", seat.Plan{TTFB: 5 * ms, Wait: 10 * ms, Elapsed: time.Hour, CompletionTokens: 1_000_000}, 0, []string{"timeout"}, "unknown"},
		{"reset mid-stream", seat.Plan{TTFB: 5 * ms, Wait: 10 * ms, Elapsed: time.Second, ResetAfter: 50 * ms, CompletionTokens: 100}, 0, []string{"reset"}, "failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, srv := upstreamAt(t, seatserver.OpenAI, tt.plan)
			px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
			req, _ := http.NewRequest(http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(openaiStream))
			began := time.Now()
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
			require.NoError(t, err)
			_, readErr := io.ReadAll(resp.Body)
			resp.Body.Close()
			took := time.Since(began)
			assert.Less(t, took, 4*time.Second, "bounded by the hard timeouts")
			if tt.status != 0 {
				assert.Equal(t, tt.status, resp.StatusCode)
				assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
			} else {
				assert.Equal(t, 200, resp.StatusCode)
				assert.Error(t, readErr, "a cut stream must not look complete")
			}
			rs := px.done(t, "p7-1") // a job of its own: its last row carries its end
			assert.Equal(t, tt.outcomes, column(rs, outcomeOf))
			assert.Equal(t, tt.end, rs[len(rs)-1].JobEnd, "a timeout is not proof of failure")
			if rs[0].Outcome == admit.Timeout {
				assert.Equal(t, admit.Ambiguous, rs[0].Billing)
				// The upstream requests were cancelled, not left running.
				require.Eventually(t, func() bool {
					for _, r := range srv.Requests() {
						if r.State == seatserver.StateInFlight {
							return false
						}
					}
					return true
				}, 2*time.Second, 10*ms)
			}
		})
	}
}

// Headers a Connection header names are connection-level (RFC 9110
// §7.6.1): the proxy forwards them neither way, as it forwards no
// Keep-Alive or Upgrade; every other header passes through.
func TestConnectionNamedHeadersStay(t *testing.T) {
	var got http.Header
	up := http.NewServeMux()
	up.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Connection", "X-Up-Hop")
		w.Header().Set("X-Up-Hop", "1")
		w.Header().Set("X-Up-End", "2")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	})
	srv := &http.Server{Handler: up}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", "http://"+ln.Addr().String()+"/v1")})
	resp, _ := post(t, px.url+"/v1/chat/completions", kinds[0].body,
		"Connection", "keep-alive, x-client-hop", "X-Client-Hop", "1", "X-Client-End", "2")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	px.rows.wait(t, 1)
	require.NotNil(t, got)
	assert.Empty(t, got.Get("X-Client-Hop"), "named by the client's Connection")
	assert.Equal(t, "2", got.Get("X-Client-End"))
	assert.Empty(t, resp.Header.Get("X-Up-Hop"), "named by the answer's Connection")
	assert.Equal(t, "2", resp.Header.Get("X-Up-End"))
}

// The client's key is forwarded, never logged; a seat with api_key_env
// sends its own instead.
func TestKeys(t *testing.T) {
	var got []string
	up := http.NewServeMux()
	up.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	})
	srv := &http.Server{Handler: up}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String() + "/v1"

	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	post(t, px.url+"/v1/chat/completions", kinds[0].body, "Authorization", "Bearer "+plantedKey)
	own := seatCfg("s", "openai", base)
	own.APIKeyEnv = "SEAT_KEY"
	px2 := start(t, testPolicy(), []seat.Config{own})
	post(t, px2.url+"/v1/chat/completions", kinds[0].body, "Authorization", "Bearer "+plantedKey)
	px.rows.wait(t, 1)
	px2.rows.wait(t, 1)
	assert.Equal(t, []string{"Bearer " + plantedKey, "Bearer sk-seat-own-KEY-123456"}, got)
	for _, text := range []string{px.rows.text(), px2.rows.text()} {
		assert.NotContains(t, text, "SECRET")
		assert.NotContains(t, text, "own-KEY")
		assert.NotContains(t, text, "PROMPT-CANARY")
		assert.Contains(t, text, "outcome=ok")
	}
}

// Limits: a body too large is 413, a header block too large 431, a
// request past the concurrency bound 503 with Retry-After; the proxy's
// own answers have rows (TestLimitRows).
func TestLimits(t *testing.T) {
	base, srv := upstreamAt(t, seatserver.OpenAI, seat.Plan{TTFB: 5 * ms, Wait: 300 * ms, Elapsed: 400 * ms, CompletionTokens: 5})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) {
		o.MaxBody = 1 << 10
		o.MaxConcurrent, o.MaxClientConcurrent = 1, 1 // one client: its share is every slot
	})
	resp, body := post(t, px.url+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"`+strings.Repeat("x", 2<<10)+`"}]}`)
	assert.Equal(t, 413, resp.StatusCode)
	assert.Contains(t, body, "request body over 1024 bytes")

	resp, _ = post(t, px.url+"/v1/chat/completions", kinds[0].body, "X-Big", strings.Repeat("y", 2*MaxHeaderBytes))
	assert.Equal(t, 431, resp.StatusCode)

	slow := make(chan struct{})
	go func() {
		defer close(slow)
		post(t, px.url+"/v1/chat/completions", kinds[0].body)
	}()
	require.Eventually(t, func() bool { return len(srv.Requests()) == 1 }, 2*time.Second, time.Millisecond)
	busy, body := post(t, px.url+"/v1/chat/completions", kinds[0].body)
	assert.Equal(t, 503, busy.StatusCode)
	assert.Contains(t, body, "proxy busy")
	assert.Equal(t, "1", busy.Header.Get("Retry-After"))
	<-slow
	rs := px.rows.wait(t, 3)
	assert.Len(t, rs, 3, "a row for the forwarded request, the 413 and the 503 (the 431 is net/http's)")
}

// SIGTERM drains: a request in flight runs to its end, its retries
// included (a 500, then the stream), every row is written, and each
// request's last row carries its job's end: no job is left open.
func TestDrain(t *testing.T) {
	base, _ := upstreamAt(t, seatserver.OpenAI, seat.Plan{Status: 500, Elapsed: 5 * ms}, seat.Plan{TTFB: 5 * ms, Wait: 100 * ms, Elapsed: 300 * ms, CompletionTokens: 5})
	pol := testPolicy()
	pol.Retry.BaseDelay = 10 * ms
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
	done := make(chan string)
	go func() {
		_, b := post(t, px.url+"/v1/chat/completions", openaiStream, "X-Retrygate-Job", "streaming")
		done <- b
	}()
	require.Eventually(t, func() bool {
		px.px.mu.Lock()
		defer px.px.mu.Unlock()
		return px.px.jobs["streaming"] != nil
	}, 2*time.Second, 5*ms)
	px.stop()
	assert.Contains(t, <-done, "[DONE]", "the request in flight finished, retry and all")
	rs := px.rows.all()
	require.Len(t, rs, 2)
	assert.Equal(t, []string{"server_error", "ok"}, column(rs, outcomeOf))
}

// A timed-out attempt is retried on the fallback seat, in the same
// request, with that seat's model; the breaker and the chain apply as in
// rehearse.
func TestFallbackAfterTimeout(t *testing.T) {
	pol := testPolicy()
	pol.Timeouts.Hard = 200 * ms
	first, _ := upstreamAt(t, seatserver.OpenAI, seat.Plan{Hang: true, TTFB: time.Hour})
	second, srv2 := upstreamAt(t, seatserver.OpenAI, okPlan)
	px := start(t, pol, []seat.Config{seatCfg("a", "openai", first), seatCfg("b", "openai", second)})
	resp, _ := post(t, px.url+"/v1/chat/completions", kinds[0].body, "X-Retrygate-Job", "fb")
	require.Equal(t, 200, resp.StatusCode, "failed over inside the request")
	rs := px.done(t, "fb")
	require.Len(t, rs, 2)
	assert.Equal(t, "a", rs[0].Seat)
	assert.Equal(t, admit.Timeout, rs[0].Outcome)
	assert.Equal(t, "b", rs[1].Seat)
	assert.True(t, rs[1].Fallback)
	assert.Equal(t, "m-b", rs[1].Model)
	assert.Len(t, srv2.Requests(), 1)
}

// When the hard timeout is what is left of the deadline, the client gets
// 504 and the job ends unknown at once.
func TestTimeoutAtDeadlineEndsUnknown(t *testing.T) {
	pol := testPolicy()
	pol.Budget.Deadline = 300 * ms
	pol.Timeouts.Hard = 5 * time.Second
	base, _ := upstreamAt(t, seatserver.OpenAI, seat.Plan{Hang: true, TTFB: time.Hour})
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
	resp, body := post(t, px.url+"/v1/chat/completions", kinds[0].body)
	assert.Equal(t, 504, resp.StatusCode)
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Contains(t, body, "hard timeout")
	rs := px.rows.wait(t, 2)
	assert.Equal(t, admit.Timeout, rs[0].Outcome)
	assert.Equal(t, "refuse: deadline", rs[1].Decision)
	assert.Equal(t, "unknown", rs[1].JobEnd)
	_ = context.Background
}

// A request the gate does not time (a model list) passes through to the
// seat, unlogged.
func TestPassThrough(t *testing.T) {
	up := http.NewServeMux()
	up.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"data":[{"id":"m1"}],"auth":"`+r.Header.Get("Authorization")+`"}`)
	})
	srv := &http.Server{Handler: up}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", "http://"+ln.Addr().String()+"/v1")})
	req, _ := http.NewRequest(http.MethodGet, px.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+plantedKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, `{"data":[{"id":"m1"}],"auth":"Bearer `+plantedKey+`"}`, string(b))
	px.stop()
	assert.Empty(t, px.rows.all())
}

// With the breaker open and no fallback left, the answer is 503, final
// (the proxy does not wait out a cooldown inside a request, as the loop
// does not), with a Retry-After of the cooldown left (rounded up) for
// what it is worth. The breaker's transitions go to OnBreaker, not onto
// a row's note; the breaker is the seat's for the model sent.
func TestBreakerOpen503(t *testing.T) {
	base, srv := upstreamAt(t, seatserver.OpenAI, seat.Plan{Status: 500, Elapsed: 5 * ms})
	pol := testPolicy()
	pol.Retry.BaseDelay = 10 * ms
	pol.Breaker = admit.BreakerConfig{Window: time.Minute, FailureRate: 0.5, MinRequests: 2, Cooldown: 30 * time.Second, HalfOpenProbes: 1}
	var changes []string
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) {
		o.OnBreaker = func(seat, model string, _ time.Time, from, to admit.BreakerState) {
			changes = append(changes, seat+" "+model+" "+from.String()+" "+to.String())
		}
	})
	resp, _ := post(t, px.url+"/v1/chat/completions", kinds[0].body)
	require.Equal(t, 500, resp.StatusCode, "two attempts, the provider's last answer")
	px.rows.wait(t, 3)
	px.clock.Advance(10*time.Second + 300*ms)
	resp, body := post(t, px.url+"/v1/chat/completions", kinds[0].body)
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, "20", resp.Header.Get("Retry-After"), "the cooldown left, rounded up")
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Contains(t, body, "refuse: breaker open")
	assert.Len(t, srv.Requests(), 2, "the refusal never reached the provider")
	rs := px.rows.wait(t, 4)
	for _, r := range rs {
		assert.NotContains(t, r.Note, "breaker", "row %d", r.Attempt)
	}
	assert.Equal(t, "refuse: breaker open", rs[3].Decision)
	// Another model through the same seat is another deployment: its
	// breaker is closed.
	resp, _ = post(t, px.url+"/v1/chat/completions", strings.Replace(kinds[0].body, `"m1"`, `"m2"`, 1))
	assert.Equal(t, 500, resp.StatusCode, "m2 reached the provider")
	assert.Len(t, srv.Requests(), 4)
	px.stop()
	assert.Equal(t, []string{"s m1 closed open", "s m2 closed open"}, changes)
}

// A success whose outcome opens the breaker (the window's failure rate
// reached with it) carries no breaker note: the transition is the
// seat's, not the request's.
func TestSuccessRowCarriesNoBreakerNote(t *testing.T) {
	base, _ := upstreamAt(t, seatserver.OpenAI, seat.Plan{Status: 500, Elapsed: 5 * ms}, seat.Plan{Status: 500, Elapsed: 5 * ms}, okPlan)
	pol := testPolicy()
	pol.Retry.BaseDelay = 10 * ms
	pol.Breaker = admit.BreakerConfig{Window: time.Minute, FailureRate: 0.5, MinRequests: 3, Cooldown: 30 * time.Second, HalfOpenProbes: 1}
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
	for _, want := range []int{500, 200} {
		resp, _ := post(t, px.url+"/v1/chat/completions", kinds[0].body)
		require.Equal(t, want, resp.StatusCode)
	}
	rs := px.rows.wait(t, 4)
	assert.Equal(t, admit.OK, rs[3].Outcome)
	assert.NotContains(t, rs[3].Note, "breaker")
	assert.False(t, px.px.breaker(0, "m1").Ready(px.clock.Now()), "the success opened the breaker (2 of 3 failed)")
}

// Nothing is committed to the client before the answer is accepted: an
// upstream that sends its headers and then nothing for 400 ms (the model
// starting) gives the client its headers with the first chunk, not
// before (until then a retry or a failover could still answer instead).
func TestHeadersWaitForFirstContent(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		time.Sleep(400 * ms) // the model starting: a real delay on loopback
		_, _ = io.WriteString(w, benchStream)
	}))
	t.Cleanup(up.Close)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", up.URL+"/v1")})
	req, err := http.NewRequest(http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(openaiStream))
	require.NoError(t, err)
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	headers := time.Since(t0)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, headers, 400*ms, "the headers were held for the first chunk")
	assert.Equal(t, benchStream, string(body))
}

// A gated request reaches the upstream with its route's path (the seat's
// base_url path, as an Azure-style deployment has it) and the client's
// own query, escapes kept.
func TestRequestTargetKept(t *testing.T) {
	var mu sync.Mutex
	var got []string
	up := http.NewServeMux()
	up.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.RequestURI+" "+r.Host)
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	})
	srv := &http.Server{Handler: up}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", "http://"+ln.Addr().String()+"/openai/deployments/gpt-4o")})
	target := "/openai/deployments/gpt-4o/chat/completions?api-version=2024-06-01&x=a%20b"
	resp, body := post(t, px.url+target, `{"model":"m1","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	assert.Equal(t, 200, resp.StatusCode, body)
	px.rows.wait(t, 1)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"POST " + target + " " + ln.Addr().String()}, got)
}

// A later request of a named job that succeeded continues the job: its
// attempt is the job's next, under the job's budget, and its row
// follows the first. A named job's rows carry no job_end (its client may
// always send again); a reader ends it as the writer would have: here,
// succeeded.
func TestRequestAfterSuccessContinuesTheJob(t *testing.T) {
	base, _ := upstreamAt(t, seatserver.OpenAI, okPlan)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	for range 2 {
		resp, _ := post(t, px.url+"/v1/chat/completions", kinds[0].body, headerJob, "again")
		require.Equal(t, 200, resp.StatusCode)
	}
	rs := px.done(t, "again")
	require.Len(t, rs, 2)
	for i, r := range rs {
		assert.Equal(t, i+1, r.Attempt)
		assert.Equal(t, i, r.Used)
		assert.Equal(t, admit.OK, r.Outcome)
		assert.Empty(t, r.JobEnd, "row %d", i+1)
	}
}

// On SIGTERM, a job whose one request the breaker refused has that
// row, which ended it: no made-up second row says it was cancelled.
func TestDrainAddsNoRowToRefusedJob(t *testing.T) {
	base, _ := upstreamAt(t, seatserver.OpenAI, seat.Plan{Status: 500, Elapsed: 5 * ms})
	pol := testPolicy()
	pol.Retry.BaseDelay = 10 * ms
	pol.Breaker = admit.BreakerConfig{Window: time.Minute, FailureRate: 0.5, MinRequests: 2, Cooldown: 30 * time.Second, HalfOpenProbes: 1}
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
	resp, _ := post(t, px.url+"/v1/chat/completions", kinds[0].body) // two attempts: the breaker opens
	require.Equal(t, 500, resp.StatusCode)
	resp, _ = post(t, px.url+"/v1/chat/completions", kinds[0].body, headerJob, "refused")
	require.Equal(t, 503, resp.StatusCode)
	px.stop()
	var refused []ledgerfile.Row
	for _, r := range px.rows.all() {
		if r.Job == "refused" {
			refused = append(refused, r)
		}
	}
	require.Len(t, refused, 1, "one request, one row")
	assert.Equal(t, "refuse: breaker open", refused[0].Decision)
}
