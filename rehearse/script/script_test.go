package script

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// waits lists the Wait of calls 0..n-1, in seconds: the steps below are
// told apart by their wait.
func waits(s *Script, from, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = s.PlanFor(from + i).Wait.Seconds()
	}
	return out
}

func mustParse(t *testing.T, src string) *Script {
	t.Helper()
	s, err := Parse([]byte(src), "t.yaml")
	require.NoError(t, err)
	return s
}

func TestPlanForRepeatAndThen(t *testing.T) {
	loop := mustParse(t, `
steps:
  - {wait: 1s, repeat: 2}
  - {wait: 2s}
  - {wait: 3s, repeat: 3}
`)
	assert.Equal(t, 6, loop.Len())
	assert.Equal(t, 3, loop.Steps())
	assert.Equal(t, Loop, loop.Then(), "loop is the default")
	assert.Equal(t, []float64{1, 1, 2, 3, 3, 3}, waits(loop, 0, 6))
	assert.Equal(t, []float64{1, 1, 2, 3, 3, 3, 1, 1, 2, 3, 3, 3}, waits(loop, 6, 12), "loop starts again")
	assert.Equal(t, 1.0, loop.PlanFor(-5).Wait.Seconds(), "a negative call index is the first call")
	assert.Equal(t, 1.0, loop.PlanFor(math.MaxInt).Wait.Seconds(), "(2^63-1) mod 6 == 1")

	last := mustParse(t, `
then: last
steps:
  - {wait: 1s, repeat: 2}
  - {wait: 2s}
  - {wait: 3s, repeat: 3}
`)
	assert.Equal(t, []float64{1, 1, 2, 3, 3, 3, 3, 3, 3}, waits(last, 0, 9))
	assert.Equal(t, 3.0, last.PlanFor(math.MaxInt).Wait.Seconds())

	lastNoRepeat := mustParse(t, "then: last\nsteps: [{wait: 1s}, {wait: 2s}]\n")
	assert.Equal(t, []float64{1, 2, 2, 2}, waits(lastNoRepeat, 0, 4))
	loopNoRepeat := mustParse(t, "steps: [{wait: 1s}, {wait: 2s}]\n")
	assert.Equal(t, []float64{1, 2, 1, 2}, waits(loopNoRepeat, 0, 4))

	big := mustParse(t, "steps: [{wait: 1s, repeat: 1000000}, {wait: 2s, repeat: 1000000000}, {wait: 3s}]\n")
	assert.Equal(t, 1_001_000_001, big.Len())
	assert.Equal(t, []float64{1, 2}, waits(big, 999_999, 2))
	assert.Equal(t, []float64{2, 3, 1}, waits(big, 1_000_999_999, 3))
}

func TestPlanForIsDeterministic(t *testing.T) {
	data, err := os.ReadFile("../../testdata/seats/bad-day.yaml")
	require.NoError(t, err)
	a, err := Parse(data, "bad-day.yaml")
	require.NoError(t, err)
	b, err := Parse(data, "bad-day.yaml")
	require.NoError(t, err)
	for i := range 3 * a.Len() {
		require.Equal(t, a.PlanFor(i), b.PlanFor(i), "call %d", i)
		require.Equal(t, a.PlanFor(i), a.PlanFor(i), "call %d asked twice", i)
	}
	// Resolving the same plan under the same limits gives the same observation.
	for i := range a.Len() {
		require.Equal(t,
			seat.Resolve(a.PlanFor(i), 20*time.Second, 15*time.Second, 10*time.Second),
			seat.Resolve(b.PlanFor(i), 20*time.Second, 15*time.Second, 10*time.Second))
	}
}

func TestPlanForDoesNotAllocate(t *testing.T) {
	s, err := Load("../../testdata/seats/bad-day.yaml")
	require.NoError(t, err)
	var sink seat.Plan
	n := 0
	allocs := testing.AllocsPerRun(1000, func() {
		sink = s.PlanFor(n)
		n += 7
	})
	assert.Zero(t, allocs)
	_ = sink
}

func TestBuiltin(t *testing.T) {
	assert.Equal(t, []string{"free-seat"}, BuiltinNames())
	s, err := Builtin("free-seat")
	require.NoError(t, err)
	assert.Equal(t, "free-seat", s.Name())
	assert.Equal(t, "scratch", s.Model())
	assert.Equal(t, 2, s.Len())

	_, err = Builtin("../seed003")
	assert.EqualError(t, err, `unknown built-in script "../seed003" (have free-seat)`)
	old, err := Builtin("seed003")
	require.NoError(t, err, "the former name still works")
	assert.Equal(t, "free-seat", old.Name())
}

// The embedded demo and its copy under testdata must not drift apart.
func TestBuiltinSeed003MatchesTestdata(t *testing.T) {
	embedded, err := BuiltinSource("free-seat")
	require.NoError(t, err)
	onDisk, err := os.ReadFile("../../testdata/seats/seed003.yaml")
	require.NoError(t, err)
	assert.Equal(t, string(embedded), string(onDisk),
		"testdata/seats/seed003.yaml must be a byte-for-byte copy of rehearse/script/builtin/free-seat.yaml")
}

// Seed 003: budget deadline 45s, token ceiling 8000, max attempts 2, wait cap 5s.
func TestSeed003Resolve(t *testing.T) {
	s, err := Builtin("seed003")
	require.NoError(t, err)
	const (
		hard      = 25 * time.Second
		waitCap   = 5 * time.Second
		slowAfter = 10 * time.Second
	)
	ms := time.Millisecond

	p0 := s.PlanFor(0)
	planGap := (p0.Elapsed - p0.Wait) / time.Duration(p0.CompletionTokens-1)
	a1 := seat.Resolve(p0, hard, waitCap, slowAfter)
	assert.Equal(t, seat.Observation{
		TTFB: 1200 * ms, HasTTFB: true,
		Wait: 1200 * ms, HasWait: true,
		Elapsed:      7200 * ms,
		PromptTokens: 1500, CompletionTokens: 600, TokensFrom: seat.FromScript,
		HTTPStatus: 200,
		Outcome:    admit.Reset, Billing: admit.Billable,
		// One token a chunk, evenly spread over the plan's decode time.
		ITLMean: planGap, ITLMax: planGap, HasITL: true,
	}, a1)
	assert.EqualValues(t, 2100, a1.Tokens())

	a2 := seat.Resolve(s.PlanFor(1), hard, waitCap, slowAfter)
	assert.Equal(t, admit.WaitCap, a2.Outcome)
	assert.Equal(t, 5*time.Second, a2.Elapsed)
	assert.False(t, a2.HasWait, "no first byte within the wait cap")
	assert.False(t, a2.HasTTFB)
	assert.Equal(t, admit.Ambiguous, a2.Billing)

	// The seed's own check before attempt 2, with attempt 2's real numbers:
	// the queue wait alone refuses it.
	d := admit.Decide(
		admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 2, MaxWait: waitCap},
		admit.Spent{Time: a1.Elapsed, Tokens: a1.Tokens(), Attempts: 1},
		admit.Next{Wait: 18 * time.Second, Gen: 9 * time.Second, Tokens: 2400})
	assert.Equal(t, "refuse: queue wait", d.String())
	assert.Equal(t, 37800*ms, d.Remaining.Time)
	assert.EqualValues(t, 5900, d.Remaining.Tokens)

	// Waited for without a cap, attempt 2 would answer at 27s with 2400 tokens.
	full := seat.Resolve(s.PlanFor(1), 0, 0, slowAfter)
	assert.Equal(t, admit.OK, full.Outcome)
	assert.Equal(t, 18*time.Second, full.Wait)
	assert.Equal(t, 27*time.Second, full.Elapsed)
	assert.EqualValues(t, 2400, full.Tokens())

	// The script loops: a second job replays the scenario.
	assert.Equal(t, s.PlanFor(0), s.PlanFor(2))
}

// What a client under bad-day.yaml's policy (hard 20s, wait cap 15s,
// slow_5xx_after 10s) observes of each call.
func TestBadDayResolve(t *testing.T) {
	s, err := Load("../../testdata/seats/bad-day.yaml")
	require.NoError(t, err)
	require.Equal(t, 12, s.Len())
	require.Equal(t, Last, s.Then())
	ms := time.Millisecond
	sec := time.Second
	type obs struct {
		outcome     admit.Outcome
		billing     admit.Billing
		status      int
		code        string
		retryAfter  time.Duration
		wait        time.Duration
		hasWait     bool
		elapsed     time.Duration
		prompt, cmp int64
	}
	want := []obs{
		{admit.RateLimited, admit.Free, 429, "rate_limit_exceeded", 2 * sec, 200 * ms, true, 200 * ms, 0, 0},
		{admit.OK, admit.Billable, 200, "", 0, 800 * ms, true, 3100 * ms, 1500, 450},
		{admit.ClientError, admit.Free, 400, "context_length_exceeded", 0, 300 * ms, true, 300 * ms, 0, 0},
		{admit.ServerError, admit.Free, 503, "", 0, 150 * ms, true, 150 * ms, 0, 0},
		{admit.Timeout, admit.Ambiguous, 200, "", 0, 900 * ms, true, 20 * sec, 1500, 0},
		{admit.Reset, admit.Billable, 200, "", 0, 1 * sec, true, 4 * sec, 1500, 360},
		{admit.OK, admit.Billable, 200, "", 0, 900 * ms, true, 3400 * ms, 1500, 500},
		{admit.ServerError, admit.Ambiguous, 500, "server_error", 0, 12 * sec, true, 12 * sec, 0, 0},
		{admit.RateLimited, admit.Free, 429, "rate_limit_exceeded", 60 * sec, 200 * ms, true, 200 * ms, 0, 0},
		{admit.OK, admit.Billable, 200, "", 0, 700 * ms, true, 2900 * ms, 1500, 420},
		{admit.OK, admit.Billable, 200, "", 0, 700 * ms, true, 2900 * ms, 1500, 420},
		{admit.OK, admit.Billable, 200, "", 0, 700 * ms, true, 2900 * ms, 1500, 420},
		{admit.OK, admit.Billable, 200, "", 0, 700 * ms, true, 2900 * ms, 1500, 420}, // then: last
	}
	for i, w := range want {
		o := seat.Resolve(s.PlanFor(i), 20*sec, 15*sec, 10*sec)
		got := obs{o.Outcome, o.Billing, o.HTTPStatus, o.ErrorCode, o.RetryAfter, o.Wait, o.HasWait, o.Elapsed, o.PromptTokens, o.CompletionTokens}
		assert.Equal(t, w, got, "call %d", i)
		assert.Equal(t, w.retryAfter > 0, o.HasRetryAfter, "call %d", i)
		assert.True(t, o.HasTTFB, "call %d: headers seen", i)
		assert.LessOrEqual(t, o.TTFB, o.Elapsed, "call %d", i)
	}

	// AfterFailure, under the policy in the file's comment, agrees with it.
	policy := admit.RetryPolicy{BaseDelay: 500 * ms, MaxDelay: 8 * sec, SlowServerAfter: 10 * sec, HonorRetryAfter: true, TimeoutsRetried: 1}
	step := func(i int, h admit.JobHistory) admit.RetryStep {
		o := seat.Resolve(s.PlanFor(i), 20*sec, 15*sec, 10*sec)
		return admit.AfterFailure(policy, admit.Failure{Outcome: o.Outcome, Billing: o.Billing, RetryAfter: o.RetryAfter, HasRetry: o.HasRetryAfter}, h, rand.New(rand.NewPCG(1, 2)))
	}
	assert.Equal(t, admit.RetryStep{Retry: true, Delay: 2 * sec}, step(0, admit.JobHistory{}), "Retry-After honoured")
	assert.Equal(t, admit.RetryStep{Reason: admit.ReasonPermanentError}, step(2, admit.JobHistory{}), "permanent error refused")
	timeout := step(4, admit.JobHistory{Retries: 1, Timeouts: 1})
	assert.True(t, timeout.Retry && timeout.Fallback, "timeout retried once, on the fallback")
	assert.Equal(t, admit.RetryStep{Reason: admit.ReasonRetryLimit}, step(4, admit.JobHistory{Retries: 2, Timeouts: 2}), "but not twice")
	slow := step(7, admit.JobHistory{SlowServer: 1})
	assert.True(t, slow.Retry && slow.Fallback, "slow 500 retried once, on the fallback")
	late := step(8, admit.JobHistory{})
	assert.Equal(t, 60*sec, late.Delay)
	assert.Greater(t, 200*ms+late.Delay, 45*sec, "the sleep would end past the 45s deadline")

	// Under a 5s wait cap the slow 500 never shows a byte in time.
	o := seat.Resolve(s.PlanFor(7), 20*sec, 5*sec, 10*sec)
	assert.Equal(t, admit.WaitCap, o.Outcome)
	assert.Equal(t, 5*sec, o.Elapsed)
	assert.False(t, o.HasTTFB)
	assert.Zero(t, o.HTTPStatus)
}

// Edge cases of seat.Resolve on plans a script can write.
func TestResolveScriptPlans(t *testing.T) {
	sec := time.Second
	ms := time.Millisecond
	s := mustParse(t, `
steps:
  - {hang: true}                                        # 0: nothing, ever
  - {hang: true, ttfb: 0.3s}                             # 1: headers, then nothing
  - {wait: 1s, elapsed: 6s, reset_after: 0.5s}           # 2: dropped before the headers
  - {wait: 1s, elapsed: 6s, reset_after: 4s, completion_tokens: 600}  # 3
  - {status: 500, elapsed: 8s, reset_after: 3s}          # 4: error body cut off
  - {conn_error: true}                                   # 5
  - {wait: 0.1s, elapsed: 24h, completion_tokens: 1000000000}  # 6: huge, no overflow
  - {hang: true, reset_after: 7s}                        # 7: a hang the network ends
`)
	// A hang with no wait: the wait cap fires first, or the hard timeout.
	o := seat.Resolve(s.PlanFor(0), 20*sec, 5*sec, 0)
	assert.Equal(t, admit.WaitCap, o.Outcome)
	assert.Equal(t, 5*sec, o.Elapsed)
	assert.False(t, o.HasTTFB || o.HasWait)
	o = seat.Resolve(s.PlanFor(0), 20*sec, 0, 0)
	assert.Equal(t, admit.Timeout, o.Outcome)
	assert.Equal(t, 20*sec, o.Elapsed)
	assert.False(t, o.HasWait)

	o = seat.Resolve(s.PlanFor(1), 20*sec, 5*sec, 0)
	assert.Equal(t, admit.WaitCap, o.Outcome)
	assert.True(t, o.HasTTFB)
	assert.Equal(t, 300*ms, o.TTFB)
	assert.Equal(t, 200, o.HTTPStatus)
	assert.False(t, o.HasWait, "headers alone are not a first byte")

	o = seat.Resolve(s.PlanFor(2), 20*sec, 5*sec, 0)
	assert.Equal(t, admit.Reset, o.Outcome)
	assert.Equal(t, 500*ms, o.Elapsed)
	assert.False(t, o.HasTTFB, "the connection dropped before the headers")
	assert.Zero(t, o.HTTPStatus)
	assert.False(t, o.HasWait)

	// Reset at 4s: 3s of a 5s stream of 600 tokens.
	o = seat.Resolve(s.PlanFor(3), 20*sec, 5*sec, 0)
	assert.Equal(t, admit.Reset, o.Outcome)
	assert.EqualValues(t, 360, o.CompletionTokens)
	// Cut by a 3s hard timeout first: 2s of the same stream, same rate.
	o = seat.Resolve(s.PlanFor(3), 3*sec, 0, 0)
	assert.Equal(t, admit.Timeout, o.Outcome)
	assert.EqualValues(t, 240, o.CompletionTokens)

	o = seat.Resolve(s.PlanFor(4), 20*sec, 0, 10*sec)
	assert.Equal(t, admit.Reset, o.Outcome)
	assert.Equal(t, 3*sec, o.Elapsed)
	assert.Zero(t, o.HTTPStatus, "the 500's headers were due with its body at 8s")

	o = seat.Resolve(s.PlanFor(5), 20*sec, 5*sec, 0)
	assert.Equal(t, admit.ConnError, o.Outcome)
	assert.Equal(t, admit.Free, o.Billing)

	o = seat.Resolve(s.PlanFor(6), 12*time.Hour, 0, 0)
	assert.Equal(t, admit.Timeout, o.Outcome)
	assert.InDelta(t, 500_000_000, o.CompletionTokens, 1_000_000, "half the stream, without overflow")

	o = seat.Resolve(s.PlanFor(7), 20*sec, 0, 0)
	assert.Equal(t, admit.Reset, o.Outcome)
	assert.Equal(t, 7*sec, o.Elapsed)
	o = seat.Resolve(s.PlanFor(7), 20*sec, 5*sec, 0)
	assert.Equal(t, admit.WaitCap, o.Outcome)
	assert.Equal(t, 5*sec, o.Elapsed)
}

func TestFallbackOKAndBreaker(t *testing.T) {
	ok, err := Load("../../testdata/seats/fallback-ok.yaml")
	require.NoError(t, err)
	assert.Equal(t, "cheap-mini", ok.Model())
	for i := range 2 * ok.Len() {
		o := seat.Resolve(ok.PlanFor(i), 20*time.Second, 5*time.Second, 10*time.Second)
		assert.Equal(t, admit.OK, o.Outcome, "call %d", i)
		assert.Less(t, o.Wait, time.Second, "call %d", i)
	}
	assert.Equal(t, 2300*time.Millisecond, ok.PlanFor(1).Elapsed, "0.5s + 360 tokens at 200/s")
	assert.True(t, ok.PlanFor(2).NoUsage)

	// A breaker {window 30s, failure_rate 0.5, min_requests 4} fed the
	// script's calls one after another opens, then closes after recovery.
	br, err := Load("../../testdata/seats/breaker.yaml")
	require.NoError(t, err)
	b := admit.NewBreaker(admit.BreakerConfig{Window: 30 * time.Second, FailureRate: 0.5, MinRequests: 4, Cooldown: 10 * time.Second, HalfOpenProbes: 1}, nil)
	now := time.Unix(0, 0)
	var states []string
	for call := 0; call < 8; {
		if !b.Allow(now) {
			states = append(states, "refused")
			now = now.Add(2 * time.Second)
			continue
		}
		o := seat.Resolve(br.PlanFor(call), 20*time.Second, 5*time.Second, 10*time.Second)
		call++
		now = now.Add(o.Elapsed)
		b.Record(now, o.Outcome != admit.OK)
		states = append(states, b.State(now).String())
	}
	assert.Equal(t, []string{
		"closed", "closed", "closed", "open", // four fast 503s open it
		"refused", "refused", "refused", "refused", "refused", // cooldown
		"open", // a half-open probe hits call 4, still failing
		"refused", "refused", "refused", "refused", "refused",
		"open", // call 5, the last 503
		"refused", "refused", "refused", "refused", "refused",
		"closed", // call 6 answers: closed
		"closed",
	}, states)
}
