package admit

import (
	"math/rand/v2"
	"time"
)

// Track is one job between its attempts: what it has spent (the gate's
// inputs), the failures the retry rules count, and an estimate per seat.
// The attempt loop, `record`, `admit --log`, `claim` and every replay keep
// a job's books with it, so they cannot disagree about a job.
//
// The estimate is per job and per seat: before a job's first attempt on a
// seat nothing is observed there, and only money is reserved (DESIGN.md).
type Track struct {
	spent    Spent
	timeouts int // timeouts and wait-cap cuts so far
	slow     int // ambiguous (slow) 5xx so far
	last     Outcome
	lastAmb  bool
	seats    []seatEstimate
	lastSeat string
}

type seatEstimate struct {
	name string
	est  Estimator
}

// Reset empties t for a new job, keeping the memory of its per-seat
// estimates, so a driver that reuses a job's state allocates nothing.
func (t *Track) Reset() { *t = Track{seats: t.seats[:0]} }

// Restore starts a track from a job's spend carried on a log row (its
// cumulative spend before that row), for readers that read only a job's
// last rows. The retry history is not carried, so it restarts at zero.
func (t *Track) Restore(s Spent) {
	*t = Track{spent: Spent{
		Time: ClampDuration(s.Time), Tokens: ClampTokens(s.Tokens),
		Attempts: min(max(s.Attempts, 0), MaxAttempts), USD: ClampUSD(s.USD),
	}}
}

// Sent takes one sent attempt: its backoff and elapsed add to the job's
// time, its tokens and cost to its spend; the retry history and the
// seat's estimate learn from it.
func (t *Track) Sent(a *Attempt) {
	t.spent.Add(a)
	t.last = a.Outcome
	t.lastAmb = a.Outcome == ServerError && a.Billing == Ambiguous
	switch {
	case a.Outcome == Timeout || a.Outcome == WaitCap:
		t.timeouts++
	case t.lastAmb:
		t.slow++
	}
	t.estimator(a.Seat).Observe(a)
	t.lastSeat = a.Seat
}

// Add is the one spend accumulator: a sent attempt's backoff and elapsed
// add to the job's time, its tokens and cost to its spend, and it uses an
// attempt. Sums saturate (limits.go).
func (s *Spent) Add(a *Attempt) {
	s.Time = AddDuration(s.Time, AddDuration(a.Delay, a.Elapsed))
	s.Tokens = AddTokens(s.Tokens, a.Tokens)
	s.USD = AddUSD(s.USD, a.USD)
	s.Attempts = min(s.Attempts+1, MaxAttempts)
}

func (t *Track) estimator(seat string) *Estimator {
	for i := range t.seats {
		if t.seats[i].name == seat {
			return &t.seats[i].est
		}
	}
	if t.seats == nil {
		t.seats = make([]seatEstimate, 0, 4) // a chain is a few seats: grow once
	}
	t.seats = append(t.seats, seatEstimate{name: seat})
	return &t.seats[len(t.seats)-1].est
}

// Spent is the job's spend so far.
func (t *Track) Spent() Spent { return t.spent }

// LastSeat is the seat of the last sent attempt ("" before one).
func (t *Track) LastSeat() string { return t.lastSeat }

// Estimate is the next attempt's numbers on seat. Before the job's first
// attempt there, nothing is observed: the estimate is zero but for its
// USD, which is reserve (a Reservation, or 0 without a spend ceiling).
func (t *Track) Estimate(seat string, reserve float64) Next {
	for i := range t.seats {
		if s := &t.seats[i]; s.name == seat && s.est.Observed() {
			return s.est.Next()
		}
	}
	return Next{USD: ClampUSD(reserve)}
}

// Observed reports whether the job has observed an attempt on seat.
func (t *Track) Observed(seat string) bool {
	for i := range t.seats {
		if t.seats[i].name == seat {
			return t.seats[i].est.Observed()
		}
	}
	return false
}

// History is what the retry rules count for the job's next retry.
func (t *Track) History() JobHistory {
	return JobHistory{Retries: max(t.spent.Attempts-1, 0), Timeouts: t.timeouts, SlowServer: t.slow}
}

// End is how a job that stops now ended, judged by its last sent attempt
// (seed 004: a timeout is not proof of failure): "failed" or "unknown";
// "cancelled" when the operator stopped the last attempt.
func (t *Track) End() string {
	switch {
	case t.spent.Attempts == 0:
		return "failed"
	case t.last == Timeout || t.last == WaitCap || t.lastAmb:
		return "unknown"
	case t.last == Cancelled:
		return "cancelled"
	}
	return "failed"
}

// Before is the gate before the job's next attempt on seat, with the
// job's time spent so far given by the caller (the loop's clock, or the
// spend a log row recorded): Decide on the job's spend and the seat's
// estimate.
func (t *Track) Before(b Budget, seat string, spentTime time.Duration, reserve float64) Decision {
	d, _ := t.BeforeHeld(b, seat, spentTime, reserve, 0)
	return d
}

// BeforeHeld is Before with held attempts of the job counted: attempts
// sent and not yet taken into the track (in flight, their rows not yet
// written). Each counts as used, with the estimate on seat as spent, so
// concurrent requests of one job cannot both take its last attempt. It
// returns the spend the decision was made on, held attempts included
// (its Time is the track's: spentTime adds the wait before the attempt).
// The proxy decides with it and writes that spend on the row; a replay
// of the row (its inflight key) decides with it again.
func (t *Track) BeforeHeld(b Budget, seat string, spentTime time.Duration, reserve float64, held int) (Decision, Spent) {
	return DecideHeld(b, t.spent, spentTime, t.Estimate(seat, reserve), held)
}

// DecideHeld is the gate on spend s with held attempts in flight, each
// counted as used with the estimate n as spent, and the job's time
// spentTime: Decide on that. It returns the spend the decision was made
// on, held attempts included, its Time s's own.
func DecideHeld(b Budget, s Spent, spentTime time.Duration, n Next, held int) (Decision, Spent) {
	for range min(max(held, 0), MaxAttempts) {
		s.Attempts = min(s.Attempts+1, MaxAttempts)
		s.Tokens = AddTokens(s.Tokens, n.Tokens)
		s.USD = AddUSD(s.USD, n.USD)
	}
	at := s
	at.Time = spentTime
	return Decide(b, at, n), s
}

// Retry is the retry rules' step after the job's last attempt a, once
// Sent has taken it: AfterFailure on a's failure and the job's history.
// The loop, the proxy and every replay ask it, so they agree on a
// retry's delay (Retry-After wins over computed backoff), permanent
// errors and retry limits. A nil r leaves a computed backoff at 0; a
// Retry-After the rules honour is kept.
func (t *Track) Retry(p RetryPolicy, a *Attempt, r *rand.Rand) RetryStep {
	return AfterFailure(p, Failure{
		Outcome: a.Outcome, Billing: a.Billing,
		RetryAfter: a.RetryAfter, HasRetry: a.HasRetryAfter,
	}, t.History(), r)
}

// LiveWaitCap is the gate's wait cap enforced while an admitted attempt
// runs: one cut for it, or whose wait ran past budget.max_wait, is
// "refuse: queue wait" on its sent row. A hand-recorded attempt that
// waited longer is judged the same way: the policy would have cut it.
func LiveWaitCap(b Budget, d Decision, a *Attempt) Decision {
	if d.Admit && (a.Outcome == WaitCap || a.Wait > b.MaxWait) {
		return Refuse(ReasonQueueWait)
	}
	return d
}
