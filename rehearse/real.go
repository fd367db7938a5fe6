package rehearse

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// RealOptions runs jobs in real time against real seats.
type RealOptions struct {
	Jobs        int
	Concurrency int   // jobs at once, each with one attempt in flight (default 1)
	Clock       Clock // RealClock unless a test says otherwise
	// Rate > 0 makes arrivals open-loop: a Poisson process of Rate jobs
	// per second drawn from the loop's seeded source, each job starting on
	// its scheduled instant (read from Clock, so lateness never adds up)
	// whether or not earlier jobs have finished. Ramp steps through rates
	// instead. Result.Arrivals reports the rate achieved.
	Rate float64
	Ramp []Step
	// Duration > 0 bounds the run by time: no job starts after it, and
	// attempts in flight and sleeps at it are cut as Ctrl-C cuts them and
	// written, job_end cancelled. With Duration (or a Ramp) Jobs 0 means
	// no bound by count. The cut is timed on the wall clock.
	Duration time.Duration
	// OnSoft is told when an attempt passes the soft timeout (seed 002's
	// "still waiting" state). It runs on a timer's goroutine.
	OnSoft func(job, seat string, elapsed time.Duration)
}

// RunReal runs o.Jobs jobs against the chain's seats, o.Concurrency at a
// time. Each attempt's context carries the hard timeout as its deadline.
// When ctx is cancelled (Ctrl-C) no new job starts, attempts in flight
// are cancelled and written as outcome cancelled, sleepers are stopped,
// and RunReal returns once every row is written.
func (l *Loop) RunReal(ctx context.Context, o RealOptions) (Result, error) {
	if o.Clock == nil {
		o.Clock = RealClock{}
	}
	for i := range l.seats {
		st := &l.seats[i]
		if st.seat == nil && st.planner != nil {
			st.seat = NewPlanSeat(st.name, st.planner, o.Clock)
		}
		if st.seat == nil {
			return Result{}, errors.New("seat " + st.name + ": nothing to send to")
		}
	}
	if err := checkLoad(o.Jobs, o.Rate, o.Ramp, o.Duration); err != nil {
		return Result{}, err
	}
	arr := newArrivals(o.Rate, o.Ramp, o.Duration)
	o.Jobs = limit(o.Jobs, arr, o.Duration)
	timed := o.Duration > 0 || arr.end > 0
	// run is the jobs' context: the operator's, cut at Duration with a
	// plain cancellation (not a deadline, which a seat would read as its
	// hard timeout).
	run, cut := context.WithCancel(ctx)
	defer cut()
	if o.Duration > 0 {
		t := time.AfterFunc(o.Duration, cut)
		defer t.Stop()
	}
	if arr.open() {
		return l.runOpen(ctx, run, &o, arr, timed)
	}
	conc := min(max(o.Concurrency, 1), max(o.Jobs, 1))
	first := o.Clock.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := new(Job)
			for run.Err() == nil {
				k := int(next.Add(1))
				if k > o.Jobs || k <= 0 {
					return
				}
				l.runJob(run, j, k, &o)
			}
		}()
	}
	wg.Wait()
	return l.result(ctx, &o, min(int(next.Load()), o.Jobs), first, timed), nil
}

// result is a finished real-time run's; Ctrl-C interrupts a run even
// when every job ended: the jobs it stopped ended cancelled.
func (l *Loop) result(ctx context.Context, o *RealOptions, started int, first time.Time, timed bool) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	res := Result{Started: started, Ends: l.ends, Elapsed: o.Clock.Now().Sub(first)}
	res.Interrupted = ctx.Err() != nil && (timed || res.Ends.Total() < o.Jobs || res.Ends.Cancelled > 0)
	return res
}

// runOpen is the open-loop shape: arrivals on the clock, each job on a
// goroutine of its own. Each arrival's instant is an offset from the
// first, so a late wake-up delays that one job and not the schedule.
// The arrivals are drawn from a source seeded once from the loop's, so
// the schedule does not depend on how the jobs' jitter interleaves.
func (l *Loop) runOpen(ctx, run context.Context, o *RealOptions, arr arrivals, timed bool) (Result, error) {
	c := o.Clock
	l.mu.Lock()
	rng := rand.New(rand.NewPCG(l.rng.Uint64(), l.rng.Uint64()))
	l.mu.Unlock()
	first := c.Now()
	var wg sync.WaitGroup
	var lagSum, maxLag, lastAt, lastActual time.Duration
	started := 0
	at, ok := int64(0), true // the first arrival is at once
	for ok && started < o.Jobs && run.Err() == nil {
		due := first.Add(time.Duration(at))
		if d := due.Sub(c.Now()); d > 0 {
			if c.Sleep(run, d) != nil {
				break
			}
		}
		if run.Err() != nil {
			break
		}
		now := c.Now()
		lag := max(now.Sub(due), 0)
		lagSum += lag
		maxLag = max(maxLag, lag)
		started++
		lastAt, lastActual = time.Duration(at), now.Sub(first)
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			l.runJob(run, new(Job), k, o)
		}(started)
		at, ok = arr.next(rng, at)
	}
	stoppedAt := c.Now().Sub(first)
	wg.Wait()
	res := l.result(ctx, o, started, first, timed)
	st := ArrivalStats{Target: targetRate(o.Rate, o.Ramp), Started: started, MaxLag: maxLag}
	if started > 0 {
		st.MeanLag = lagSum / time.Duration(started)
	}
	if timed && started < o.Jobs {
		// Bounded by time: jobs started over the window, beside the jobs
		// the schedule put in it (those the client did not reach count).
		st.Window = time.Duration(arr.end) // Duration, or the ramp's end if sooner
		if ctx.Err() != nil {
			st.Window = min(st.Window, stoppedAt) // Ctrl-C ended it early
		}
		scheduled := started
		for ok && time.Duration(at) < st.Window {
			scheduled++
			at, ok = arr.next(rng, at)
		}
		st.Scheduled = perSecond(scheduled, st.Window, false)
		st.Achieved = perSecond(started, st.Window, false)
	} else {
		// Bounded by count: the gaps between the first and last starts,
		// as scheduled and as they happened.
		st.Window = lastActual
		st.Scheduled = perSecond(started, lastAt, true)
		st.Achieved = perSecond(started, lastActual, true)
	}
	res.Arrivals = st
	return res, nil
}

func (l *Loop) step(f func() Action) Action {
	l.mu.Lock()
	defer l.mu.Unlock()
	return f()
}

func (l *Loop) runJob(ctx context.Context, j *Job, k int, o *RealOptions) {
	c := o.Clock
	a := l.step(func() Action { return l.Start(j, k, c.Now()) })
	for {
		if a.Kind != Finished && ctx.Err() != nil {
			a = l.step(func() Action { return l.Cancel(j, c.Now()) })
		}
		switch a.Kind {
		case Finished:
			return
		case Sleep:
			if err := c.Sleep(ctx, a.Sleep); err != nil {
				a = l.step(func() Action { return l.Cancel(j, c.Now()) })
				continue
			}
			a = l.step(func() Action { return l.Woke(j, c.Now()) })
		case Send:
			obs := l.send(ctx, j, a, o)
			a = l.step(func() Action { return l.Done(j, &obs, c.Now()) })
		}
	}
}

// send makes one attempt under the hard timeout (a context deadline:
// seat.DoWithin).
func (l *Loop) send(ctx context.Context, j *Job, a Action, o *RealOptions) seat.Observation {
	// No lock: the seat's name and sender, and what Request reads (the
	// prompts and policy New set, and j, which this goroutine runs), do
	// not change while jobs run.
	st := &l.seats[a.Seat]
	req := l.Request(j, a)
	if o.OnSoft != nil && req.SoftTimeout > 0 {
		id, name := j.ID, st.name
		req.OnSoft = func(el time.Duration) { o.OnSoft(id, name, el) }
	}
	var obs seat.Observation
	if ps, ok := st.seat.(*PlanSeat); ok {
		actx, cancel := context.WithTimeout(ctx, a.Hard)
		obs = ps.play(actx, req, a.Hard)
		cancel()
	} else {
		obs = seat.DoWithin(ctx, st.seat, req, a.Hard)
	}
	if obs.Seat == "" {
		obs.Seat = st.name
	}
	if ctx.Err() != nil && obs.Outcome != admit.OK && obs.Outcome != admit.Cancelled {
		// The run was stopped under this attempt: whatever the seat made of
		// its cancelled context, the operator cancelled it.
		obs.Outcome, obs.Billing, obs.Detail = admit.Cancelled, admit.Ambiguous, "cancelled"
	}
	return obs
}

// PlanSeat plays a Planner in real time: each call resolves the next plan
// under the attempt's hard timeout and wait cap (seat.Resolve), then waits
// on the clock for as long as that attempt would take, so a script seat
// in a real-time chain behaves like a server with the script's timings.
type PlanSeat struct {
	name    string
	planner seat.Planner
	clock   Clock

	mu sync.Mutex
	n  int
}

// NewPlanSeat wraps p as a seat named name that waits on clock.
func NewPlanSeat(name string, p seat.Planner, clock Clock) *PlanSeat {
	return &PlanSeat{name: name, planner: p, clock: clock}
}

// Name is the seat's name.
func (s *PlanSeat) Name() string { return s.name }

// Do plays the next plan; the hard timeout is ctx's deadline.
func (s *PlanSeat) Do(ctx context.Context, req seat.Request) seat.Observation {
	var hard time.Duration
	if dl, ok := ctx.Deadline(); ok {
		hard = max(time.Until(dl), time.Nanosecond)
	}
	return s.play(ctx, req, hard)
}

func (s *PlanSeat) play(ctx context.Context, req seat.Request, hard time.Duration) seat.Observation {
	s.mu.Lock()
	plan := s.planner.PlanFor(s.n)
	s.n++
	s.mu.Unlock()
	start := s.clock.Now()
	obs := seat.Resolve(plan, hard, req.WaitCap, req.Slow5xxAfter)
	obs.Seat = s.name
	wait := obs.Elapsed
	if req.SoftTimeout > 0 && req.OnSoft != nil && wait > req.SoftTimeout {
		if err := s.clock.Sleep(ctx, req.SoftTimeout); err != nil {
			return s.stopped(ctx, err, obs, start)
		}
		req.OnSoft(req.SoftTimeout)
		wait -= req.SoftTimeout
	}
	if err := s.clock.Sleep(ctx, wait); err != nil {
		return s.stopped(ctx, err, obs, start)
	}
	return obs
}

// stopped is the observation of a plan cut short by its context. The hard
// timeout was already played by Resolve (a deadline firing a hair before
// the sleep ends is that same cut-off); anything else is a cancellation.
func (s *PlanSeat) stopped(ctx context.Context, err error, obs seat.Observation, start time.Time) seat.Observation {
	if errors.Is(err, context.DeadlineExceeded) {
		return obs
	}
	return cutShort(obs, s.clock.Now().Sub(start))
}

// cutShort is a resolved plan's observation (obs) when the operator
// stopped it el into the attempt, on either clock: cancelled, with the
// prompt it sent and the headers and first content it had by then.
func cutShort(obs seat.Observation, el time.Duration) seat.Observation {
	out := seat.Observation{
		Seat: obs.Seat, Outcome: admit.Cancelled, Billing: admit.Ambiguous,
		Elapsed: el, TokensFrom: obs.TokensFrom, Detail: "cancelled",
		PromptTokens: obs.PromptTokens,
	}
	if obs.HasTTFB && obs.TTFB <= el {
		out.TTFB, out.HasTTFB, out.HTTPStatus = obs.TTFB, true, obs.HTTPStatus
	}
	if obs.HasWait && obs.Wait <= el {
		out.Wait, out.HasWait = obs.Wait, true
	}
	return out
}
