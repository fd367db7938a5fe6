package seatserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/realtime"
	"github.com/retrygate/retrygate/rehearse/script"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// Our own client seats against the seat server, in every format: the
// numbers they measure land near the plan's, and a cancellation on their
// side reaches the server.

const keyEnv = "RETRYGATE_SEATSERVER_TEST_KEY"

func testGetenv(name string) string {
	if name == keyEnv {
		return plantedKey
	}
	return ""
}

// endpoint is one wire our seats speak to a seat server: a format and,
// for openai, its API (Chat Completions, or the Responses API).
type endpoint struct {
	f   Format
	api string
}

func (e endpoint) String() string {
	if e.api != "" {
		return string(e.f) + "-" + e.api
	}
	return string(e.f)
}

var endpoints = []endpoint{{OpenAI, ""}, {OpenAI, seat.APIResponses}, {Anthropic, ""}, {Ollama, ""}}

func ourSeat(t *testing.T, r *running, e endpoint) seat.Seat {
	t.Helper()
	s, err := seat.New(seat.Config{
		Name: "served", Kind: string(e.f), API: e.api, BaseURL: r.baseURL(e.f), Model: "gpt-4o-mini", APIKeyEnv: keyEnv,
	}, testGetenv)
	require.NoError(t, err)
	return s
}

// slack is how far past the plan a loopback measurement may land. The
// real error is a millisecond or two (BenchmarkTimingError), but a
// loaded CI box can stall any one attempt by a hundred ms or more; so an
// attempt is retried, up to tries times, and the test fails only when
// none lands within slack: a systematic error fails every try.
const (
	slack = 50 * ms
	tries = 3
)

// offBy says how a measured time misses the plan's, after taking off lag
// (how long the request took to reach the server: a cold client spends
// tens of ms before its first request is on the wire, which is the
// client's time, not the server's); "" when it lands within bounds.
func offBy(what string, plan, got, lag time.Duration) string {
	after := got - lag
	if got < plan || after < plan-2*ms || after > plan+slack {
		return fmt.Sprintf("%s: measured %s (%s after arrival), plan %s", what, got, after, plan)
	}
	return ""
}

func TestOurSeatsReadEveryFormat(t *testing.T) {
	plan := seat.Plan{TTFB: 40 * ms, Wait: 100 * ms, Elapsed: 250 * ms, PromptTokens: 42, CompletionTokens: 30}
	for _, e := range endpoints {
		f := e.f
		t.Run(e.String(), func(t *testing.T) {
			r := serve(t, f, plan)
			s := ourSeat(t, r, e)
			var misses []string
			for try := range tries {
				key := fmt.Sprintf("job-%s-%d", f, try)
				submit := time.Now()
				obs := s.Do(context.Background(), seat.Request{Prompt: prompt, MaxTokens: 64, IdempotencyKey: key})
				require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
				assert.Equal(t, 200, obs.HTTPStatus)
				require.True(t, obs.HasTTFB)
				require.True(t, obs.HasWait)
				assert.Equal(t, seat.FromUsage, obs.TokensFrom)
				assert.Equal(t, int64(42), obs.PromptTokens)
				assert.Equal(t, int64(30), obs.CompletionTokens)
				assert.Positive(t, obs.Bytes)
				rec := r.requests(t).Requests[try]
				assert.Equal(t, key, rec.IdempotencyKey)
				assert.Equal(t, StateFinished, rec.State)
				assert.Equal(t, 200, rec.Status)
				assert.Equal(t, f, rec.Format)

				// Both clocks are this process's monotonic one.
				lag := r.srv.Requests()[try].Received.Sub(submit)
				miss := strings.Join(slices.DeleteFunc([]string{
					offBy("ttfb", plan.TTFB, obs.TTFB, lag),
					offBy("wait", plan.Wait, obs.Wait, lag),
					offBy("elapsed", plan.Elapsed, obs.Elapsed, lag),
				}, func(s string) bool { return s == "" }), "; ")
				if miss == "" {
					return
				}
				misses = append(misses, miss)
				t.Logf("try %d off the plan: %s", try, miss)
			}
			t.Errorf("no try of %d landed within %s of the plan: %s", tries, slack, strings.Join(misses, " | "))
		})
	}
}

func TestOurSeatsCountTokensWithoutUsage(t *testing.T) {
	plan := seat.Plan{Wait: 20 * ms, Elapsed: 60 * ms, PromptTokens: 42, CompletionTokens: 30, NoUsage: true}
	for _, e := range endpoints {
		f := e.f
		t.Run(e.String(), func(t *testing.T) {
			r := serve(t, f, plan)
			obs := ourSeat(t, r, e).Do(context.Background(), seat.Request{Prompt: prompt, MaxTokens: 64})
			require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
			assert.Equal(t, seat.FromTokenizer, obs.TokensFrom)
			// One filler word is one token, so the local count is the plan's.
			assert.InDelta(t, 30, obs.CompletionTokens, 2)
		})
	}
}

func TestOurSeatsSeeFailureClasses(t *testing.T) {
	tests := []struct {
		name string
		plan seat.Plan
		want admit.Outcome
	}{
		{"429 with retry-after", seat.Plan{Elapsed: 20 * ms, Status: 429, RetryAfter: 2 * time.Second, HasRetryAfter: true}, admit.RateLimited},
		{"fast 503", seat.Plan{Elapsed: 20 * ms, Status: 503}, admit.ServerError},
		{"context length", seat.Plan{Elapsed: 20 * ms, Status: 400, ErrorCode: "context_length_exceeded"}, admit.ClientError},
		{"reset mid-stream", seat.Plan{Wait: 20 * ms, Elapsed: 300 * ms, ResetAfter: 80 * ms, CompletionTokens: 50}, admit.Reset},
		// The server can only close a connection it has accepted, after the
		// request was written: our seats call that a fast server_error
		// (free, like a refused connection), not conn_error.
		{"conn error", seat.Plan{ConnError: true}, admit.ServerError},
	}
	for _, e := range endpoints {
		f := e.f
		for _, tt := range tests {
			t.Run(e.String()+"/"+tt.name, func(t *testing.T) {
				r := serve(t, f, tt.plan)
				obs := ourSeat(t, r, e).Do(context.Background(), seat.Request{Prompt: prompt, MaxTokens: 64})
				assert.Equal(t, tt.want, obs.Outcome, obs.Detail)
				if tt.plan.HasRetryAfter {
					assert.True(t, obs.HasRetryAfter)
					assert.Equal(t, tt.plan.RetryAfter, obs.RetryAfter)
				}
				if tt.plan.ErrorCode != "" && f != Ollama {
					// Ollama's errors are bare strings: no code to read back.
					assert.Equal(t, tt.plan.ErrorCode, obs.ErrorCode)
				}
				if tt.plan.ConnError {
					assert.False(t, obs.HasTTFB)
					assert.Zero(t, obs.HTTPStatus)
					assert.Equal(t, admit.Free, obs.Billing)
					assert.Equal(t, StateDropped, r.requests(t).Requests[0].State)
				}
			})
		}
	}
}

// The two cancellations the issue names: the hard timeout (the attempt's
// context deadline) and the wait cap. Each must show up as cancelled on
// the server once the client gives up: the server's record says
// cancelled, not finished, never before the client's limit. How soon is
// load; the bound is a ceiling only a hang reaches (realtime: the plans
// hang for ever or run 4 s).
func TestCancellationReachesServer(t *testing.T) {
	within := realtime.Hang()
	tests := []struct {
		name    string
		plan    seat.Plan
		hard    time.Duration
		waitCap time.Duration
		want    admit.Outcome
	}{
		{"hard timeout mid-stream", seat.Plan{TTFB: 20 * ms, Wait: 50 * ms, Elapsed: 5 * time.Second, CompletionTokens: 200}, 250 * ms, 0, admit.Timeout},
		{"hard timeout on a hang", seat.Plan{TTFB: 20 * ms, Wait: script.Never, Hang: true}, 200 * ms, 0, admit.Timeout},
		{"wait cap before first content", seat.Plan{TTFB: 20 * ms, Wait: 3 * time.Second, Elapsed: 4 * time.Second}, 2 * time.Second, 150 * ms, admit.WaitCap},
	}
	for _, e := range endpoints {
		f := e.f
		for _, tt := range tests {
			t.Run(e.String()+"/"+tt.name, func(t *testing.T) {
				r := serve(t, f, tt.plan)
				s := ourSeat(t, r, e)
				submit := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), tt.hard)
				defer cancel()
				obs := s.Do(ctx, seat.Request{Prompt: prompt, MaxTokens: 64, WaitCap: tt.waitCap})
				gaveUp := time.Now()
				require.Equal(t, tt.want, obs.Outcome, obs.Detail)

				rec, _ := r.awaitState(t, 0, StateCancelled, gaveUp, within)
				assert.True(t, rec.Cancelled)
				assert.False(t, rec.Finished)
				limit := tt.hard
				if tt.waitCap > 0 {
					limit = tt.waitCap
				}
				// On the submitter's clock: the server saw the cancel no earlier
				// than the limit, and no later than within after Do returned.
				arrived := r.srv.Requests()[0].Received.Sub(submit)
				serverSaw := arrived + time.Duration(rec.AfterS*float64(time.Second))
				assert.GreaterOrEqual(t, serverSaw, limit-2*ms, "cancelled before the client's limit")
				assert.LessOrEqual(t, serverSaw, gaveUp.Sub(submit)+within,
					"the server saw the cancel at %s; the client gave up at %s", serverSaw, gaveUp.Sub(submit))
				assert.Contains(t, r.log.String(), "seat: request 0 cancelled by client after ")
			})
		}
	}
}

// A planted key and a canary prompt go through every client; neither
// appears in the server's stderr or in /_retrygate/requests.
func TestNoSecretsInServerOutput(t *testing.T) {
	for _, f := range Formats {
		t.Run(string(f), func(t *testing.T) {
			r := serve(t, f, okPlan, seat.Plan{TTFB: 10 * ms, Wait: script.Never, Hang: true}, okPlan)
			ctx := context.Background()
			// A finished request, a cancelled one, and one from an SDK.
			ourSeat(t, r, endpoint{f: f}).Do(ctx, seat.Request{Prompt: prompt, MaxTokens: 64, IdempotencyKey: "job-1"})
			hctx, cancel := context.WithTimeout(ctx, 100*ms)
			ourSeat(t, r, endpoint{f: f}).Do(hctx, seat.Request{Prompt: prompt, MaxTokens: 64, IdempotencyKey: "job-2"})
			cancel()
			// A third client, shaped as the official SDKs send (their own
			// run is in the sdktest module): key in its header, prompt in the body.
			path, hdr, val := "/chat/completions", "Authorization", "Bearer "+plantedKey
			body := `{"model":"m","messages":[{"role":"user","content":"` + prompt + `"}]}`
			switch f {
			case Anthropic:
				path, hdr, val = "/messages", "X-Api-Key", plantedKey
				body = `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"` + prompt + `"}]}`
			case Ollama:
				path = "/api/chat"
			}
			req, err := http.NewRequest(http.MethodPost, r.baseURL(f)+path, strings.NewReader(body))
			require.NoError(t, err)
			req.Header.Set(hdr, val)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.awaitState(t, 1, StateCancelled, time.Now(), time.Second)

			resp, err = http.Get(r.origin + RequestsPath)
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			for _, out := range []string{string(got), r.log.String()} {
				assert.NotContains(t, out, plantedKey)
				assert.NotContains(t, out, "PROMPT-CANARY")
				assert.NotContains(t, out, "quarterly")
			}
			assert.Contains(t, string(got), `"idempotency_key": "job-1"`)
			assert.Len(t, r.requests(t).Requests, 3)
		})
	}
}

// scaled plays a planner's calls faster by a factor, keeping "never".
type scaled struct {
	p seat.Planner
	k time.Duration
}

func (s scaled) PlanFor(n int) seat.Plan {
	p := s.p.PlanFor(n)
	for _, d := range []*time.Duration{&p.TTFB, &p.Wait, &p.Elapsed, &p.ResetAfter, &p.RetryAfter} {
		if *d < farFuture {
			*d /= s.k
		}
	}
	return p
}

// The same script, served live and resolved on the virtual clock, is the
// same attempt: bad-day.yaml's calls (20× faster) through our seats give
// the outcome, status and billing seat.Resolve predicts.
func TestServedMatchesResolve(t *testing.T) {
	day, err := script.Load("../../testdata/seats/bad-day.yaml")
	require.NoError(t, err)
	const k = 20
	planner := scaled{day, k}
	hard, waitCap, slow := 20*time.Second/k, 15*time.Second/k, 10*time.Second/k
	for _, e := range []endpoint{{OpenAI, ""}, {OpenAI, seat.APIResponses}, {Anthropic, ""}} {
		t.Run(e.String(), func(t *testing.T) {
			srv, err := New(Options{Planner: planner, Format: e.f})
			require.NoError(t, err)
			r := serveWith(t, srv)
			s := ourSeat(t, r, e)
			for n := range 10 {
				want := seat.Resolve(planner.PlanFor(n), hard, waitCap, slow)
				ctx, cancel := context.WithTimeout(context.Background(), hard)
				got := s.Do(ctx, seat.Request{Prompt: prompt, MaxTokens: 64, WaitCap: waitCap, Slow5xxAfter: slow})
				cancel()
				assert.Equal(t, want.Outcome, got.Outcome, "call %d: %s", n, got.Detail)
				assert.Equal(t, want.HTTPStatus, got.HTTPStatus, "call %d", n)
				assert.Equal(t, want.Billing, got.Billing, "call %d", n)
				assert.Equal(t, want.HasWait, got.HasWait, "call %d", n)
				if want.HasRetryAfter {
					assert.Equal(t, want.RetryAfter.Round(time.Second), got.RetryAfter.Round(time.Second), "call %d", n)
				}
			}
		})
	}
}

// TestOurResponsesSeatReadsFailedResponses: an error code on a 200
// stream is a response.failed event on /v1/responses, classified by its
// code as the failure table says.
func TestOurResponsesSeatReadsFailedResponses(t *testing.T) {
	for code, want := range map[string]admit.Outcome{
		"server_error": admit.ServerError, "rate_limit_exceeded": admit.RateLimited, "invalid_prompt": admit.ClientError,
	} {
		t.Run(code, func(t *testing.T) {
			r := serve(t, OpenAI, seat.Plan{TTFB: 10 * ms, Wait: 10 * ms, Elapsed: 30 * ms, ErrorCode: code})
			obs := ourSeat(t, r, endpoint{OpenAI, seat.APIResponses}).Do(context.Background(), seat.Request{Prompt: prompt, MaxTokens: 64})
			assert.Equal(t, want, obs.Outcome, obs.Detail)
			assert.Equal(t, code, obs.ErrorCode)
			assert.Equal(t, 200, obs.HTTPStatus)
		})
	}
}

// A plan's token parts reach our seats through each wire's own fields:
// Chat Completions' cached and reasoning details, the Messages API's two
// cache fields beside input_tokens; Ollama has none to report.
func TestOurSeatsReadTokenParts(t *testing.T) {
	plan := seat.Plan{Wait: 5 * ms, Elapsed: 10 * ms, PromptTokens: 4000, CompletionTokens: 300,
		CachedTokens: 3000, CacheWriteTokens: 900, ReasoningTokens: 200, HasCached: true, HasCacheWrite: true, HasReasoning: true}
	type want struct {
		cached, write, reasoning int64
		has                      [3]bool
	}
	for e, w := range map[endpoint]want{
		{OpenAI, ""}:                {3000, 0, 200, [3]bool{true, false, true}},
		{OpenAI, seat.APIResponses}: {3000, 900, 200, [3]bool{true, true, true}},
		{Anthropic, ""}:             {3000, 900, 0, [3]bool{true, true, false}},
		{Ollama, ""}:                {0, 0, 0, [3]bool{}},
	} {
		t.Run(e.String(), func(t *testing.T) {
			obs := ourSeat(t, serve(t, e.f, plan), e).Do(context.Background(), seat.Request{Prompt: prompt, MaxTokens: 400})
			require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
			assert.Equal(t, seat.FromUsage, obs.TokensFrom)
			assert.Equal(t, int64(4000), obs.PromptTokens)
			assert.Equal(t, int64(300), obs.CompletionTokens)
			assert.Equal(t, w.has, [3]bool{obs.HasCached, obs.HasCacheWrite, obs.HasReasoning})
			assert.Equal(t, [3]int64{w.cached, w.write, w.reasoning}, [3]int64{obs.CachedTokens, obs.CacheWriteTokens, obs.ReasoningTokens})
		})
	}
}

// TestOurResponsesSeatReadsIncomplete: a step's incomplete is
// response.incomplete on /v1/responses, streamed or whole: the outcome
// incomplete with its reason, as the script seat resolves it.
func TestOurResponsesSeatReadsIncomplete(t *testing.T) {
	plan := seat.Plan{TTFB: 5 * ms, Wait: 10 * ms, Elapsed: 40 * ms, PromptTokens: 42, CompletionTokens: 30, Incomplete: "max_output_tokens"}
	want := seat.Resolve(plan, 0, 0, 0)
	require.Equal(t, admit.Incomplete, want.Outcome)
	r := serve(t, OpenAI, plan)
	obs := ourSeat(t, r, endpoint{OpenAI, seat.APIResponses}).Do(context.Background(), seat.Request{Prompt: prompt, MaxTokens: 30})
	assert.Equal(t, want.Outcome, obs.Outcome, obs.Detail)
	assert.Equal(t, want.ErrorCode, obs.ErrorCode)
	assert.Equal(t, want.Billing, obs.Billing)
	assert.Equal(t, [2]int64{42, 30}, [2]int64{obs.PromptTokens, obs.CompletionTokens})
	rec := r.requests(t).Requests[0]
	assert.Equal(t, "status=200 ttfb=0.005 wait=0.010 elapsed=0.040 tokens=42+30 incomplete=max_output_tokens", rec.Plan)
	assert.Equal(t, "responses", rec.API)

	// Whole: one Response object, status incomplete.
	resp, err := http.Post(r.origin+ResponsesPath, "application/json", strings.NewReader(`{"model":"m","input":"hi"}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(b), `"status":"incomplete"`)
	assert.Contains(t, string(b), `"incomplete_details":{"reason":"max_output_tokens"}`)

	// Chat Completions says it its own way: finish_reason length.
	resp, err = http.Post(r.origin+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(b), `"finish_reason":"length"`)
}

// A plan's rate-limit state goes out in each API's own headers and our
// seats read it back as the plan has it; Ollama has no such headers.
func TestOurSeatsReadRateLimits(t *testing.T) {
	rl := admit.RateLimit{RemainingRequests: 59, RemainingTokens: 0, Reset: 6*time.Minute + 1500*ms, HasRequests: true, HasTokens: true, HasReset: true}
	plan := seat.Plan{Elapsed: 5 * ms, Status: 429, RetryAfter: 2 * time.Second, HasRetryAfter: true, RateLimit: rl}
	for _, e := range endpoints {
		f := e.f
		t.Run(e.String(), func(t *testing.T) {
			obs := ourSeat(t, serve(t, f, plan), e).Do(context.Background(), seat.Request{Prompt: prompt, MaxTokens: 16})
			require.Equal(t, admit.RateLimited, obs.Outcome, obs.Detail)
			want := rl
			if f == Ollama {
				want = admit.RateLimit{}
			}
			assert.Equal(t, want, obs.RateLimit)
			assert.Equal(t, rl, seat.Resolve(plan, 0, 0, 0).RateLimit, "as the virtual clock sees it")
		})
	}
}
