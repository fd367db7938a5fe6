package admit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var jobT0 = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)

func jobChain(seats ...string) *Chain {
	c := &Chain{
		Budget: Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 3, MaxWait: 5 * time.Second},
		Retry:  RetryPolicy{BaseDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second, HonorRetryAfter: true, TimeoutsRetried: 1},
		Hard:   25 * time.Second,
	}
	for _, s := range seats {
		c.Seats = append(c.Seats, ChainSeat{Name: s})
	}
	return c
}

func sent(seat string, o Outcome, elapsed time.Duration) *Attempt {
	return &Attempt{Seat: seat, Outcome: o, Wait: elapsed, Elapsed: elapsed, Content: o == OK, Tokens: 100, Prompt: 80, Completion: 20}
}

// A persistent failure on the first seat keeps a job there while the
// later seats still have an attempt each, then moves it on: with three
// attempts and two seats, primary, primary, fallback.
func TestJobLastAttemptsGoToTheLaterSeats(t *testing.T) {
	c := jobChain("primary", "fallback")
	var j Job
	j.Start(jobT0, c.Budget.Deadline)
	r := rand.New(rand.NewPCG(1, 1))
	now := jobT0
	var seats []int
	for range 3 {
		p := j.Before(c, Ask{Now: now, Waited: j.Waited(now)})
		require.True(t, p.Decision.Admit, p.Decision.String())
		seats = append(seats, p.Seat)
		a := sent(c.Seats[p.Seat].Name, ServerError, 100*time.Millisecond)
		j.Settle(c, p.Seat, now, a, Usage{}, p.Probe)
		now = now.Add(a.Elapsed)
		mv := j.Take(c, p.Seat, a, r)
		if mv.Kind != Again {
			assert.Equal(t, Refused, mv.Kind)
			assert.Equal(t, ReasonAttemptCap, mv.Decision.Reason)
			assert.Equal(t, 4, mv.Attempt, "the refusal is numbered after the three attempts")
			break
		}
		assert.LessOrEqual(t, mv.Delay, BackoffCeiling(c.Retry, j.Track().History().Retries))
		now = now.Add(mv.Delay)
	}
	assert.Equal(t, []int{0, 0, 1}, seats)

	// Two attempts, two seats: the second is the fallback's.
	c.Budget.MaxAttempts = 2
	j.Start(jobT0, c.Budget.Deadline)
	p := j.Before(c, Ask{Now: jobT0})
	mv := j.Take(c, p.Seat, sent("primary", RateLimited, time.Millisecond), r)
	require.Equal(t, Again, mv.Kind)
	assert.Equal(t, 1, mv.Seat)
	// One seat: nowhere else to go.
	c = jobChain("only")
	j.Start(jobT0, c.Budget.Deadline)
	p = j.Before(c, Ask{Now: jobT0})
	mv = j.Take(c, p.Seat, sent("only", ServerError, time.Millisecond), r)
	assert.Equal(t, 0, mv.Seat)
}

// Before's order: the retry rules' refusal first (with the gate's failing
// checks beside it), then the breakers (every seat open: breaker open),
// then the gate, then what is left of the deadline, then the retry budget.
func TestJobBeforeOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	t.Run("permanent error first", func(t *testing.T) {
		c := jobChain("a")
		c.Budget.MaxAttempts = 1
		var j Job
		j.Start(jobT0, c.Budget.Deadline)
		p := j.Before(c, Ask{Now: jobT0})
		mv := j.Take(c, p.Seat, sent("a", ClientError, time.Millisecond), r)
		assert.Equal(t, Refused, mv.Kind)
		assert.Equal(t, ReasonPermanentError, mv.Decision.Reason)
		// A client retry of the job is refused by the rule, the cap beside it.
		p = j.Before(c, Ask{Now: jobT0.Add(time.Second), Waited: time.Second})
		assert.Equal(t, "refuse: permanent error", p.Decision.String())
		assert.Equal(t, []Reason{ReasonPermanentError, ReasonAttemptCap}, p.Decision.Failing)
	})
	t.Run("breakers along the chain", func(t *testing.T) {
		c := jobChain("a", "b")
		cfg := BreakerConfig{Window: time.Minute, FailureRate: 0.5, MinRequests: 1, Cooldown: 10 * time.Second}
		c.Seats[0].Breaker, c.Seats[1].Breaker = NewBreaker(cfg, nil), NewBreaker(cfg, nil)
		c.Seats[0].Breaker.Record(jobT0, true)
		var j Job
		j.Start(jobT0, c.Budget.Deadline)
		p := j.Before(c, Ask{Now: jobT0})
		require.True(t, p.Decision.Admit)
		assert.Equal(t, 1, p.Seat, "a's breaker is open: the walk lands on b")
		c.Seats[1].Breaker.Record(jobT0, true)
		var k Job
		k.Start(jobT0, c.Budget.Deadline)
		p = k.Before(c, Ask{Now: jobT0})
		assert.Equal(t, "refuse: breaker open", p.Decision.String())
		assert.Equal(t, 0, p.Seat, "the row is the job's own seat's")
		// After the cooldown a half-open probe goes to a, and a failing
		// probe falls through to b in the same job.
		later := jobT0.Add(11 * time.Second)
		var m Job
		m.Start(later, c.Budget.Deadline)
		p = m.Before(c, Ask{Now: later})
		require.True(t, p.Decision.Admit)
		assert.Equal(t, 0, p.Seat)
		assert.True(t, p.Probe)
		a := sent("a", ServerError, time.Millisecond)
		m.Settle(c, p.Seat, later, a, Usage{}, p.Probe)
		assert.Equal(t, Open, c.Seats[0].Breaker.State(later), "the failed probe reopens a")
		mv := m.Take(c, p.Seat, a, r)
		require.Equal(t, Again, mv.Kind)
		at := later.Add(mv.Delay)
		assert.Equal(t, HalfOpen, c.Seats[1].Breaker.State(at))
		p = m.Before(c, Ask{Now: at, Waited: mv.Delay})
		require.True(t, p.Decision.Admit)
		assert.Equal(t, 1, p.Seat, "the retry falls through to b's probe")
		ok := sent("b", OK, time.Second)
		m.Settle(c, p.Seat, at, ok, Usage{}, p.Probe)
		assert.Equal(t, Closed, c.Seats[1].Breaker.State(at), "a successful probe closes b: traffic returns")
	})
	t.Run("deadline left", func(t *testing.T) {
		c := jobChain("a")
		var j Job
		j.Start(jobT0, c.Budget.Deadline)
		p := j.Before(c, Ask{Now: jobT0.Add(c.Budget.Deadline)})
		assert.Equal(t, "refuse: deadline", p.Decision.String(), "the clock has spent the deadline though the books have not")
		p = j.Before(c, Ask{Now: jobT0.Add(40 * time.Second)})
		require.True(t, p.Decision.Admit)
		assert.Equal(t, 5*time.Second, p.Hard, "what is left of the deadline caps the hard timeout")
	})
	t.Run("retry budget last", func(t *testing.T) {
		c := jobChain("a")
		rb := NewRetryBudget(RetryBudgetConfig{Ratio: 0, MinPerSecond: 0, Window: time.Minute})
		c.RetryGate = rb
		var j Job
		j.Start(jobT0, c.Budget.Deadline)
		p := j.Before(c, Ask{Now: jobT0})
		require.True(t, p.Decision.Admit, "a first attempt is never refused by the budget")
		assert.False(t, p.HasWindow)
		j.Take(c, p.Seat, sent("a", ConnError, time.Millisecond), r)
		p = j.Before(c, Ask{Now: jobT0.Add(time.Millisecond)})
		assert.Equal(t, "refuse: retry budget", p.Decision.String())
		assert.Equal(t, BudgetWindow{Firsts: 1}, p.Window)
		// A new job that is a client's retry counts as one.
		var k Job
		k.Start(jobT0, c.Budget.Deadline)
		p = k.Before(c, Ask{Now: jobT0, ClientRetry: true})
		assert.Equal(t, "refuse: retry budget", p.Decision.String())
	})
}

// Before sleeping, an attempt the gate must refuse whatever the wait is
// refused at once, carrying the wait it saved.
func TestJobRefusedBeforeSleeping(t *testing.T) {
	c := jobChain("a")
	c.Budget.Deadline = 3 * time.Second
	var j Job
	j.Start(jobT0, c.Budget.Deadline)
	p := j.Before(c, Ask{Now: jobT0})
	a := sent("a", RateLimited, 100*time.Millisecond)
	a.RetryAfter, a.HasRetryAfter = 5*time.Second, true
	mv := j.Take(c, p.Seat, a, nil)
	require.Equal(t, Refused, mv.Kind)
	assert.Equal(t, ReasonDeadline, mv.Decision.Reason)
	assert.Equal(t, 5*time.Second, mv.Delay, "the Retry-After the refusal saved")
	assert.Equal(t, 2, mv.Attempt)
	assert.Equal(t, "failed", mv.End)
}

// Settle bills, costs and records: a fast 5xx is free, an answer is
// priced from its usage, and a cancel says nothing to the breaker.
func TestJobSettle(t *testing.T) {
	c := jobChain("a")
	c.Retry.SlowServerAfter = 10 * time.Second
	c.Seats[0].Prices, c.Seats[0].Priced = Prices{In: 1, Out: 2, CachedIn: 1, CacheWrite: 1}, true
	c.Seats[0].Breaker = NewBreaker(BreakerConfig{Window: time.Minute, FailureRate: 0.5, MinRequests: 2, Cooldown: time.Minute}, nil)
	var j Job
	j.Start(jobT0, c.Budget.Deadline)
	cancelled := &Attempt{Outcome: Cancelled, Elapsed: time.Second}
	priced, note := j.Settle(c, 0, jobT0, cancelled, Usage{}, true)
	assert.True(t, priced)
	assert.Equal(t, "half-open probe", note)
	assert.Equal(t, Ambiguous, cancelled.Billing)
	assert.Equal(t, Closed, c.Seats[0].Breaker.State(jobT0), "a cancel is not the seat's failure")
	ok := &Attempt{Outcome: OK, Elapsed: time.Second}
	j.Settle(c, 0, jobT0, ok, Usage{Prompt: 1_000_000, Completion: 1_000_000}, false)
	assert.Equal(t, Billable, ok.Billing)
	assert.InDelta(t, 3.0, ok.USD, 1e-12)
	fast := &Attempt{Outcome: ServerError, Elapsed: time.Second}
	j.Settle(c, 0, jobT0, fast, Usage{}, false)
	assert.Equal(t, Free, fast.Billing)
	assert.Equal(t, Open, c.Seats[0].Breaker.State(jobT0))
}

// A cancel leaves the retry rules' last answer standing: a client that
// hung up may come back under the same job, and a permanent error
// before the cancel still refuses it.
func TestJobCancelKeepsTheRetryRules(t *testing.T) {
	c := jobChain("a")
	var j Job
	j.Start(jobT0, c.Budget.Deadline)
	p := j.Before(c, Ask{Now: jobT0})
	j.Take(c, p.Seat, sent("a", ClientError, time.Millisecond), nil)
	j.Take(c, 0, &Attempt{Seat: "a", Outcome: Cancelled, Elapsed: time.Second}, nil)
	step, ok := j.Step()
	require.True(t, ok)
	assert.Equal(t, ReasonPermanentError, step.Reason)
}

// A job stored and loaded (the proxy's shared books) decides as the job
// that was stored.
func TestJobStateRoundTrip(t *testing.T) {
	c := jobChain("a", "b")
	var j Job
	j.Start(jobT0, c.Budget.Deadline)
	var took []Attempt
	p := j.Before(c, Ask{Now: jobT0})
	a := sent("a", ServerError, 12*time.Second)
	took = append(took, *a)
	mv := j.Take(c, p.Seat, a, nil)
	require.Equal(t, Again, mv.Kind)
	var k Job
	k.Load(j.State(took))
	at := jobT0.Add(13 * time.Second)
	pj := j.Before(c, Ask{Now: at, Waited: j.Waited(at)})
	pk := k.Before(c, Ask{Now: at, Waited: k.Waited(at)})
	assert.Equal(t, pj, pk)
	assert.Equal(t, j.Track().Spent(), k.Track().Spent())
}

// A context-length error goes once, at once, to the next seat with a
// larger window; never back to the same seat; a second one is final.
func TestJobContextLengthGoesToALargerWindow(t *testing.T) {
	c := jobChain("small", "other", "big")
	c.Seats[0].Window, c.Seats[1].Window, c.Seats[2].Window = 8192, 4096, 128000
	var j Job
	j.Start(jobT0, c.Budget.Deadline)
	p := j.Before(c, Ask{Now: jobT0})
	long := &Attempt{Seat: "small", Outcome: ClientError, ContextLength: true, Elapsed: 50 * time.Millisecond}
	mv := j.Take(c, p.Seat, long, rand.New(rand.NewPCG(1, 1)))
	require.Equal(t, Again, mv.Kind)
	assert.Equal(t, 2, mv.Seat, "past other, whose window is smaller")
	assert.Zero(t, mv.Delay)
	p = j.Before(c, Ask{Now: jobT0.Add(50 * time.Millisecond)})
	require.True(t, p.Decision.Admit)
	assert.Equal(t, 2, p.Seat)
	assert.True(t, p.Widen)
	again := &Attempt{Seat: "big", Outcome: ClientError, ContextLength: true, Elapsed: 50 * time.Millisecond}
	mv = j.Take(c, p.Seat, again, nil)
	require.Equal(t, Refused, mv.Kind)
	assert.Equal(t, ReasonPermanentError, mv.Decision.Reason, "once")

	// No larger window further on: the error is the caller's.
	c = jobChain("big", "small")
	c.Seats[0].Window, c.Seats[1].Window = 128000, 8192
	j.Start(jobT0, c.Budget.Deadline)
	p = j.Before(c, Ask{Now: jobT0})
	mv = j.Take(c, p.Seat, &Attempt{Seat: "big", Outcome: ClientError, ContextLength: true}, nil)
	require.Equal(t, Refused, mv.Kind)
	assert.Equal(t, ReasonPermanentError, mv.Decision.Reason)
	// A client's retry of the job is refused too: no seat is larger.
	p = j.Before(c, Ask{Now: jobT0.Add(time.Second)})
	assert.Equal(t, "refuse: permanent error", p.Decision.String())

	// Any other permanent error goes to the caller as it is.
	c = jobChain("small", "big")
	c.Seats[0].Window, c.Seats[1].Window = 8192, 128000
	j.Start(jobT0, c.Budget.Deadline)
	p = j.Before(c, Ask{Now: jobT0})
	mv = j.Take(c, p.Seat, &Attempt{Seat: "small", Outcome: ClientError}, nil)
	assert.Equal(t, Refused, mv.Kind)
}

// An attempt's Skip passes the seats it cannot use, as an open breaker
// is passed; with none left from the job's seat, the attempt is refused
// on the job's own seat.
func TestJobBeforeSkip(t *testing.T) {
	c := jobChain("a", "b", "c")
	var j Job
	j.Start(jobT0, c.Budget.Deadline)
	p := j.Before(c, Ask{Now: jobT0, Skip: func(s int) bool { return s < 2 }})
	require.True(t, p.Decision.Admit, p.Decision.String())
	assert.Equal(t, 2, p.Seat, "a and b passed")
	assert.Equal(t, 2, j.Seat())

	var k Job
	k.Start(jobT0, c.Budget.Deadline)
	p = k.Before(c, Ask{Now: jobT0, Skip: func(int) bool { return true }})
	assert.False(t, p.Decision.Admit)
	assert.Equal(t, 0, p.Seat)
}
