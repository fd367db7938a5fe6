package rehearse

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
)

var (
	okPlan   = seat.Plan{TTFB: 200 * time.Millisecond, Wait: 800 * time.Millisecond, Elapsed: 3 * time.Second, PromptTokens: 1000, CompletionTokens: 500}
	fast503  = seat.Plan{Status: 503, Elapsed: 100 * time.Millisecond}
	hangPlan = seat.Plan{Hang: true, TTFB: 100 * time.Millisecond, Wait: 100 * time.Millisecond, PromptTokens: 1000}
)

// quiet is the default policy without a breaker, for tests about other rules.
func quiet() Policy {
	p := DefaultPolicy()
	p.Breaker.FailureRate = 0
	return p
}

func TestRehearseSameSeedSameRows(t *testing.T) {
	p := quiet()
	p.Budget.MaxAttempts = 5
	flaky := plans{fast503, fast503, fast503, okPlan}
	a, _ := virtual(t, p, 1, 42, spec("s", flaky))
	b, _ := virtual(t, p, 1, 42, spec("s", flaky))
	c, _ := virtual(t, p, 1, 43, spec("s", flaky))
	require.Len(t, a, 4)
	assert.Equal(t, a.log(), b.log(), "same seed: identical rows")
	for i := 1; i < 4; i++ {
		assert.NotEqual(t, a[i].Delay, c[i].Delay, "different seeds: different jitter (retry %d)", i)
		// Full jitter: rand(0, min(max_delay, base_delay·2^(n−1))).
		assert.LessOrEqual(t, a[i].Delay, admit.BackoffCeiling(p.Retry, i))
	}
}

func TestRehearseDeadlineMadeOnce(t *testing.T) {
	// Each attempt's hard timeout is min(timeouts.hard, what is left of the
	// deadline): the second attempt gets only what the first left (seed 000).
	p := quiet()
	p.Budget.Deadline = 30 * time.Second
	p.Budget.MaxWait = 10 * time.Second
	p.Timeouts.Hard = 25 * time.Second
	got, res := virtual(t, p, 1, 1, spec("a", plans{hangPlan}), spec("b", plans{hangPlan}))
	require.Len(t, got, 3)
	assert.Equal(t, 25*time.Second, got[0].Elapsed)
	assert.Equal(t, admit.Timeout, got[0].Outcome)
	assert.Equal(t, "b", got[1].Seat, "a timed-out attempt is retried on the next fallback seat")
	assert.Equal(t, 30*time.Second-got[1].SpentS-got[1].Delay, got[1].Elapsed, "the retry's hard timeout is the deadline's remainder after its backoff")
	assert.Equal(t, admit.Timeout, got[1].Outcome)
	assert.True(t, got[2].Unsent)
	assert.Equal(t, ledgerfile.JobUnknown, got[2].JobEnd, "a job whose last attempt timed out is unknown, not failed")
	assert.Equal(t, 1, res.Ends.Unknown)
}

func TestRehearseTimeoutsRetriedAtMostOnce(t *testing.T) {
	p := quiet()
	p.Budget.MaxAttempts = 5
	p.Budget.Deadline = 10 * time.Minute
	p.Budget.MaxWait = time.Minute
	got, _ := virtual(t, p, 1, 1, spec("only", plans{hangPlan}))
	require.Len(t, got, 3)
	assert.Equal(t, admit.Timeout, got[0].Outcome)
	assert.Equal(t, admit.Timeout, got[1].Outcome)
	assert.False(t, got[1].Fallback, "no fallback seat: the retry stays")
	assert.True(t, got[2].Unsent)
	assert.Equal(t, "refuse: retry limit", got[2].Decision, "attempts remain: the timeouts' one retry is used")
	assert.Equal(t, 2, got[2].Used)
	assert.Equal(t, ledgerfile.JobUnknown, got[2].JobEnd)
}

func TestRehearseRefusalCarriesTheEstimate(t *testing.T) {
	// A reset spends 1500 tokens; the estimate for the retry is the last
	// prompt + completion seen (1000 + 500), which would pass 2800.
	p := quiet()
	p.Budget.TokenCeiling = 2800
	reset := seat.Plan{Wait: time.Second, Elapsed: 4 * time.Second, ResetAfter: 4 * time.Second, PromptTokens: 1000, CompletionTokens: 500}
	got, _ := virtual(t, p, 1, 1, spec("s", plans{reset, okPlan}))
	require.Len(t, got, 2)
	r := got[1]
	assert.True(t, r.Unsent)
	assert.Equal(t, "refuse: token ceiling", r.Decision)
	assert.Equal(t, int64(1500), r.Tokens, "the estimate's tokens")
	assert.Equal(t, time.Second, r.Wait, "the estimate's wait: the last observed")
	assert.Equal(t, 4*time.Second, r.Elapsed, "a reset returned bytes until it broke: its elapsed is the estimate")
	assert.Equal(t, int64(1500), r.SpentTokens)
	assert.Equal(t, 1, r.Used)
	assert.Equal(t, ledgerfile.JobFailed, r.JobEnd)
}

func TestRehearseSpendCeilingAndCost(t *testing.T) {
	p := quiet()
	p.Budget.MaxSpendUSD = 0.01
	reset := seat.Plan{Wait: time.Second, Elapsed: 4 * time.Second, ResetAfter: 4 * time.Second, PromptTokens: 1000, CompletionTokens: 500}
	s := spec("priced", plans{reset, okPlan})
	s.Config.PriceIn, s.Config.PriceOut = 4, 8 // USD per 1M: 1000·4e-6 + 500·8e-6 = 0.008
	got, _ := virtual(t, p, 1, 1, s)
	require.Len(t, got, 2)
	assert.True(t, got[0].HasCost)
	assert.InDelta(t, 0.008, got[0].CostUSD, 1e-12)
	assert.Equal(t, "refuse: spend ceiling", got[1].Decision)
	assert.InDelta(t, 0.008, got[1].SpentUSD, 1e-12)
	assert.False(t, got[1].HasCost, "a refused row costs nothing")
}

func TestRehearseClientErrorsDoNotOpenTheBreaker(t *testing.T) {
	p := DefaultPolicy()
	p.Breaker.MinRequests = 2
	bad := seat.Plan{Status: 400, ErrorCode: "invalid_request_error", Elapsed: 50 * time.Millisecond}
	var out rows
	l := newLoop(t, p, 6, 1, &out, spec("s", plans{bad}))
	_, err := l.RunVirtual(VirtualOptions{Jobs: 6, Start: t0})
	require.NoError(t, err)
	assert.Equal(t, admit.Closed, l.Breaker(0).State(t0.Add(time.Hour)))
	for _, r := range out {
		assert.NotEqual(t, "refuse: breaker open", r.Decision)
	}
}

func TestRehearseConcurrentVirtualJobs(t *testing.T) {
	var out rows
	l := newLoop(t, quiet(), 5, 1, &out, spec("s", plans{okPlan}))
	res, err := l.RunVirtual(VirtualOptions{Jobs: 5, Concurrency: 2, Start: t0})
	require.NoError(t, err)
	require.Len(t, out, 5)
	assert.Equal(t, 5, res.Ends.Succeeded)
	assert.Equal(t, t0, out[0].TS)
	assert.Equal(t, t0, out[1].TS, "two jobs at once")
	assert.Equal(t, t0.Add(okPlan.Elapsed), out[2].TS, "the third starts when a slot frees")
	assert.Equal(t, 3*okPlan.Elapsed, res.Elapsed)
}

func TestRehearseJobIDs(t *testing.T) {
	var out rows
	l, err := New(Config{Policy: quiet(), Seats: []SeatSpec{spec("s", plans{okPlan})}, Rand: seeded(1), Sink: out.sink, Run: 12, Jobs: 100})
	require.NoError(t, err)
	_, err = l.RunVirtual(VirtualOptions{Jobs: 100, Start: t0})
	require.NoError(t, err)
	assert.Equal(t, "r12-001", out[0].Job)
	assert.Equal(t, "r12-100", out[99].Job)
}

func TestRehearseNewRejects(t *testing.T) {
	p := DefaultPolicy()
	p.Retry.MaxDelay = time.Millisecond
	_, err := New(Config{Policy: p, Seats: []SeatSpec{spec("s", plans{okPlan})}, Rand: seeded(1)})
	require.ErrorContains(t, err, "retry.max_delay")
	_, err = New(Config{Policy: DefaultPolicy(), Rand: seeded(1)})
	require.ErrorContains(t, err, "fallback")
	_, err = New(Config{Policy: DefaultPolicy(), Seats: []SeatSpec{spec("s", plans{okPlan}), spec("s", plans{okPlan})}, Rand: seeded(1)})
	require.ErrorContains(t, err, `"s" is named twice`)

	l, err := New(Config{Policy: DefaultPolicy(), Seats: []SeatSpec{{Config: seat.Config{Name: "live"}, Seat: &recordingSeat{}}}, Rand: seeded(1)})
	require.NoError(t, err)
	_, err = l.RunVirtual(VirtualOptions{Jobs: 1})
	require.ErrorContains(t, err, `seat "live": only script seats run on the virtual clock`)
}

// recordingSeat answers from a planner at once, advancing a virtual clock
// by each attempt's elapsed time, and records every request it got.
type recordingSeat struct {
	mu    sync.Mutex
	reqs  []seat.Request
	inner *PlanSeat
}

func (s *recordingSeat) Name() string { return "rec" }
func (s *recordingSeat) Do(ctx context.Context, req seat.Request) seat.Observation {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	return s.inner.Do(ctx, req)
}

func TestRehearseRealDriverMatchesVirtual(t *testing.T) {
	// One loop, two drivers: the real-time driver on a virtual clock, with
	// script seats played by PlanSeat, writes the virtual driver's rows.
	p := badDayPolicy()
	want, _ := virtual(t, p, 7, 4, scriptSpec(t, "bad-day"), scriptSpec(t, "fallback-ok"))

	var got rows
	l := newLoop(t, p, 7, 4, &got, scriptSpec(t, "bad-day"), scriptSpec(t, "fallback-ok"))
	res, err := l.RunReal(context.Background(), RealOptions{Jobs: 7, Concurrency: 1, Clock: NewVirtualClock(t0)})
	require.NoError(t, err)
	assert.False(t, res.Interrupted)
	assert.Equal(t, want.log(), got.log())
}

func TestRehearseIdempotencyKeyIsTheJob(t *testing.T) {
	clock := NewVirtualClock(t0)
	rec := &recordingSeat{inner: NewPlanSeat("rec", plans{fast503, fast503, okPlan, okPlan}, clock)}
	var out rows
	l, err := New(Config{
		Policy: quiet(), Seats: []SeatSpec{{Config: seat.Config{Name: "rec"}, Seat: rec}},
		Rand: seeded(1), Sink: out.sink, Run: 3, Jobs: 2, Prompt: "p", MaxTokens: 99,
	})
	require.NoError(t, err)
	_, err = l.RunReal(context.Background(), RealOptions{Jobs: 2, Clock: clock})
	require.NoError(t, err)
	var keys []string
	for _, r := range rec.reqs {
		keys = append(keys, r.IdempotencyKey)
		assert.Equal(t, 5*time.Second, r.WaitCap, "the wait cap travels with every attempt")
		assert.Equal(t, 99, r.MaxTokens)
	}
	// Job 1 fails twice (two attempts), job 2 succeeds at once.
	assert.Equal(t, []string{"r3-1", "r3-1", "r3-2"}, keys)
}

// blockingSeat answers nothing until its context ends, like a seat that
// never returns; started is signalled when a request arrives.
type blockingSeat struct{ started chan string }

func (s *blockingSeat) Name() string { return "block" }
func (s *blockingSeat) Do(ctx context.Context, req seat.Request) seat.Observation {
	s.started <- req.IdempotencyKey
	<-ctx.Done()
	return seat.Observation{Outcome: admit.Cancelled, Billing: admit.Ambiguous, Elapsed: time.Millisecond}
}

func TestRehearseCtrlCCancelsInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bs := &blockingSeat{started: make(chan string, 4)}
	var mu sync.Mutex
	var out rows
	l, err := New(Config{
		Policy: quiet(), Seats: []SeatSpec{{Config: seat.Config{Name: "block"}, Seat: bs}},
		Rand: seeded(1), Run: 1, Jobs: 10,
		Sink: func(r *ledgerfile.Row) { mu.Lock(); out.sink(r); mu.Unlock() },
	})
	require.NoError(t, err)
	done := make(chan Result)
	go func() {
		res, err := l.RunReal(ctx, RealOptions{Jobs: 10, Concurrency: 2})
		assert.NoError(t, err)
		done <- res
	}()
	<-bs.started
	<-bs.started
	cancel()
	res := <-done
	assert.True(t, res.Interrupted)
	assert.Equal(t, 2, res.Started)
	assert.Equal(t, Ends{Cancelled: 2}, res.Ends)
	require.Len(t, out, 2)
	for _, r := range out {
		assert.Equal(t, admit.Cancelled, r.Outcome)
		assert.Equal(t, ledgerfile.JobCancelled, r.JobEnd)
		assert.False(t, r.Unsent)
	}
}

func TestRehearseCancelWhileSleeping(t *testing.T) {
	var out rows
	l := newLoop(t, quiet(), 1, 1, &out, spec("s", plans{fast503, okPlan}))
	j := new(Job)
	a := l.Start(j, 1, t0)
	require.Equal(t, Send, a.Kind)
	obs := seat.Resolve(fast503, a.Hard, a.WaitCap, 0)
	a = l.Done(j, &obs, t0.Add(obs.Elapsed))
	require.Equal(t, Sleep, a.Kind)
	a = l.Cancel(j, t0.Add(obs.Elapsed+a.Sleep/2))
	assert.Equal(t, Finished, a.Kind)
	require.Len(t, out, 2)
	assert.True(t, out[1].Unsent)
	assert.Equal(t, admit.Cancelled, out[1].Outcome)
	assert.Equal(t, "refuse: cancelled", out[1].Decision)
	assert.Equal(t, ledgerfile.JobCancelled, out[1].JobEnd)
}

func TestRehearseSoftTimeoutNote(t *testing.T) {
	clock := NewVirtualClock(t0)
	slow := seat.Plan{Wait: 2 * time.Second, Elapsed: 9 * time.Second, PromptTokens: 10, CompletionTokens: 10}
	var notes []string
	var out rows
	l := newLoop(t, quiet(), 1, 1, &out, spec("slow", plans{slow}))
	_, err := l.RunReal(context.Background(), RealOptions{Jobs: 1, Clock: clock, OnSoft: func(job, seat string, el time.Duration) {
		notes = append(notes, job+" "+seat+" "+el.String())
	}})
	require.NoError(t, err)
	assert.Equal(t, []string{"r1-1 slow 6s"}, notes)
	assert.Equal(t, t0.Add(9*time.Second), clock.Now())
}

func TestRehearseReserveRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rehearsal.log")
	w := ledgerfile.NewWriter(path, false)
	defer w.Close()
	n, err := ReserveRun(w, "seed=1")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	require.NoError(t, w.Append(ledgerfile.Row{Job: "r1-1", Attempt: 1, Wait: time.Second}))
	w2 := ledgerfile.NewWriter(path, false) // a second process on the same log
	defer w2.Close()
	n, err = ReserveRun(w2, "seed=1")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), ledgerfile.Header+"\n# run r1 seed=1\njob=r1-1"), string(data))
	assert.Contains(t, string(data), "\n# run r2 seed=1\n")
	rows, _, err := ledgerfile.ReadFile(path)
	require.NoError(t, err)
	assert.Len(t, rows, 1, "comment lines are not rows")
}

func TestRehearsePoissonArrivals(t *testing.T) {
	var out rows
	l := newLoop(t, quiet(), 50, 9, &out, spec("s", plans{okPlan}))
	res, err := l.RunVirtual(VirtualOptions{Jobs: 50, Rate: 2, Start: t0})
	require.NoError(t, err)
	assert.Equal(t, 50, res.Ends.Succeeded)
	// 50 arrivals at 2/s span about 25s; jobs overlap (each takes 3s).
	last := out[len(out)-1].TS.Sub(t0)
	assert.Greater(t, last, 10*time.Second)
	assert.Less(t, last, 60*time.Second)
}

func TestRehearseVirtualCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out rows
	l, err := New(Config{
		Policy: quiet(), Seats: []SeatSpec{spec("s", plans{okPlan})}, Rand: seeded(1), Run: 1, Jobs: 10000,
		Sink: func(r *ledgerfile.Row) {
			out.sink(r)
			if len(out) == 100 {
				cancel() // Ctrl-C, mid-run
			}
		},
	})
	require.NoError(t, err)
	res, err := l.RunVirtual(VirtualOptions{Jobs: 10000, Concurrency: 3, Start: t0, Ctx: ctx})
	require.NoError(t, err)
	assert.True(t, res.Interrupted)
	assert.Equal(t, 3, res.Ends.Cancelled, "the jobs in flight when it stopped")
	assert.Less(t, res.Ends.Total(), 10000)
	require.Greater(t, len(out), 3)
	for _, r := range out[len(out)-3:] {
		assert.Equal(t, ledgerfile.JobCancelled, r.JobEnd)
		assert.Equal(t, admit.Cancelled, r.Outcome)
	}

	// Stopped before it began: nothing runs.
	var none rows
	res, err = newLoop(t, quiet(), 5, 1, &none, spec("s", plans{okPlan})).RunVirtual(VirtualOptions{Jobs: 5, Start: t0, Ctx: ctx})
	require.NoError(t, err)
	assert.True(t, res.Interrupted)
	assert.Empty(t, none)
}
