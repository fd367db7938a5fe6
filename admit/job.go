package admit

import (
	"math/rand/v2"
	"time"
)

// This file is the one job machine (DESIGN.md, "One job machine"): every
// decision around one job's attempts, composed once. The attempt loop on
// both clocks, simulate, the proxy and every replay of a log (check,
// admit --log, record, claim) drive it; none composes its own. It reads no
// clock and draws no number of its own: time and the jitter's source come
// in with each call.
//
// Before an attempt (Job.Before), in this order: the retry rules on the
// job's last failure, the breakers along the chain, the gate on the job's
// spend and the landing seat's estimate, what is left of the deadline,
// the retry budget, then the half-open probe. After an attempt: its
// billing class, cost and breaker record (Job.Settle, when it ends), then
// the job's books, the retry rules, the next wait and the failover
// (Job.Take, when the driver has written its row).

// Chain is what a job's attempts may use and what every job of one
// driver shares: the policy's numbers, the seats in fallback order with
// their breakers, and the retry budget. A driver builds it once (the
// loop, once per prompt) or once per request (the proxy: the route the
// client's model picks, with the breakers of that seat and model).
type Chain struct {
	Budget Budget
	Retry  RetryPolicy
	Hard   time.Duration // timeouts.hard: an attempt's longest run
	Seats  []ChainSeat
	// RetryGate is the retry budget (retry.budget): nil, or one whose
	// policy is off, never refuses. The loop and the proxy pass their
	// *RetryBudget; a replay passes the window its row recorded.
	RetryGate RetryGate
	// Round is how the log keeps a duration (ledgerfile.Resolution): a
	// wait the machine charges or sets is rounded by it, so a replay of
	// the row reads the number the decision was made on. Nil keeps
	// durations as they are.
	Round func(time.Duration) time.Duration
}

// ChainSeat is one seat of a chain.
type ChainSeat struct {
	Name    string
	Breaker *Breaker // nil: no breaker (a replay; a seat of its own)
	// Reserve is what a job's first attempt here reserves under a spend
	// ceiling (Reservation; 0 without one).
	Reserve float64
	Prices  Prices
	Priced  bool // Prices hold a rate card: Settle costs the attempt
	// Window is the seat's declared context window in tokens (0: not
	// declared): a context-length error goes on to a seat with a larger one.
	Window int64
}

// RetryGate is a retry budget as the machine asks it: the decision on a
// retry, with the window it was judged on, and the count of a send.
// *RetryBudget is one.
type RetryGate interface {
	Decide(d Decision, retry bool, now time.Time) (Decision, BudgetWindow)
	Sent(at time.Time, retry bool)
}

// Job is one job's state between its attempts: its books (Track), the
// retry rules' answer after its last failure, the seat its next attempt
// starts from, and its deadline. The zero Job is a job with no clock (a
// replay reads times from the rows); Start gives it one.
type Job struct {
	track    Track
	step     RetryStep // the retry rules' answer after the last failure taken
	stepSet  bool
	seat     int // where the next attempt's walk along the chain starts
	attempts int // attempts numbered so far: sent and refused
	start    time.Time
	deadline time.Time
	clocked  bool
	widened  bool // a context-length error sent the job to a larger window
}

// Start begins the job at now: its deadline is made here, once, and every
// attempt inherits it. A reused Job keeps its books' memory.
func (j *Job) Start(now time.Time, deadline time.Duration) {
	j.Reset()
	j.start, j.deadline, j.clocked = now, now.Add(deadline), true
}

// Reset empties the job for another, with no clock (a replay's).
func (j *Job) Reset() {
	seats := j.track.seats[:0] // the per-seat estimates' memory (Track.Reset)
	*j = Job{}
	j.track.seats = seats
}

// Restore starts the job's books from a spend a log row carried (a
// reader of a job's last rows only): see Track.Restore.
func (j *Job) Restore(s Spent) { j.track.Restore(s) }

// Track is the job's books (read only: the drivers fill rows from it).
func (j *Job) Track() *Track { return &j.track }

// Seat is where the job's next attempt starts its walk along the chain.
func (j *Job) Seat() int { return j.seat }

// Attempts is how many attempts the job has numbered, sent or refused.
func (j *Job) Attempts() int { return j.attempts }

// Renumber says the job's next row is attempt n: a replay follows the
// numbers its rows carry (a log read from a job's middle).
func (j *Job) Renumber(n int) { j.attempts = max(n-1, 0) }

// Deadline is when the job's deadline passes (zero with no clock).
func (j *Job) Deadline() time.Time { return j.deadline }

// Started is when the job started (zero with no clock).
func (j *Job) Started() time.Time { return j.start }

// Step is the retry rules' answer after the job's last failure, and
// whether there is one (none before a failure, none after a success).
func (j *Job) Step() (RetryStep, bool) { return j.step, j.stepSet }

// Waited is how much of the job's time since its start its books have
// not charged at now: the wait since its last attempt ended, as a driver
// that does not sleep for it (the proxy's client) measures it.
func (j *Job) Waited(now time.Time) time.Duration {
	if !j.clocked {
		return 0
	}
	return max(now.Sub(j.start)-j.track.Spent().Time, 0)
}

// End is how the job ends if it stops now: the writer's rule for its
// job_end (Track.End).
func (j *Job) End() string { return j.track.End() }

// Ask is what a driver tells the machine before an attempt.
type Ask struct {
	Now time.Time
	// Waited is the wait before this attempt: the sleep the loop slept,
	// the time the proxy's client took (Job.Waited), a row's delay_s.
	// The gate charges it to the deadline, and at least the delay the
	// retry rules set after the last failure.
	Waited time.Duration
	// Held is how many of the job's attempts are out and not taken into
	// its books (a replay of a log whose writer decided with attempts in
	// flight: its inflight key). Each counts as used, its estimate spent.
	Held int
	// ClientRetry: the attempt is a client's retry though the job is new
	// (a request naming no job that carries a client retry count): the
	// retry budget counts it as a retry.
	ClientRetry bool
	// Estimate, when set, is the next attempt's numbers in place of the
	// landing seat's estimate: what a hand-written row, admit's flags, or
	// a refused row of a job read from its middle say the gate saw.
	Estimate *Next
	// Skip, when set, says a seat of the chain this attempt cannot use:
	// the walk along the chain passes it as it passes an open breaker
	// (the proxy's continuation of a cut stream: a seat that takes no
	// assistant prefill).
	Skip func(seat int) bool
}

// Plan is the machine's answer before an attempt: the decision, where
// the attempt goes, and the numbers its row carries.
type Plan struct {
	Decision Decision
	Attempt  int // the attempt's number (refusals are numbered too)
	// Seat is the chain index the attempt goes to; on a refusal, the seat
	// whose estimate the gate saw (the job's own when every breaker is
	// open).
	Seat  int
	Hard  time.Duration // admitted: min(chain.Hard, what is left of the deadline)
	Delay time.Duration // the wait charged to the deadline (the row's delay_s)
	Spent Spent         // the spend the decision was made on, held attempts included
	Held  int
	// Window is the retry budget's counts when it judged the attempt.
	Window    BudgetWindow
	HasWindow bool
	Probe     bool // admitted as a half-open breaker's probe
	Retry     bool // the retry budget counted it as a retry
	Widen     bool // it follows a context-length error: on a larger window
}

// Before is the one pre-send order: the retry rules on the job's last
// failure, the breakers along the chain from the job's seat, the gate
// on the landing seat's estimate (with the wait charged), what is left of
// the deadline, the retry budget, the half-open probe. An admitted
// attempt takes its breaker's probe and the retry budget's count; either
// way it is numbered.
func (j *Job) Before(c *Chain, a Ask) Plan {
	var p Plan
	j.BeforeTo(&p, c, a)
	return p
}

// BeforeTo is Before into *p (the attempt loop's job keeps its plan).
func (j *Job) BeforeTo(p *Plan, c *Chain, a Ask) {
	*p = Plan{Attempt: j.attempts + 1, Held: a.Held, Retry: j.attempts > 0 || a.ClientRetry}
	j.attempts++
	// The breakers along the chain: the first seat from the job's own
	// whose breaker lets an attempt through.
	// After a context-length error, only a seat with a larger window.
	widen := j.stepSet && j.step.Retry && j.step.Widen
	s := j.seat
	for s < len(c.Seats) && (widen && c.Seats[s].Window <= j.step.Window || a.Skip != nil && a.Skip(s) || !c.Seats[s].Breaker.Ready(a.Now)) {
		s++
	}
	open := s == len(c.Seats)
	narrow := false
	if open {
		s = min(j.seat, len(c.Seats)-1) // the row is the job's own seat's
		narrow = widen
		for t := j.seat; narrow && t < len(c.Seats); t++ {
			narrow = c.Seats[t].Window <= j.step.Window
		}
	}
	p.Widen = widen
	p.Seat = s
	st := &c.Seats[s]
	// The gate charges the wait before the attempt to the deadline, and
	// at least the delay the retry rules set (a Retry-After they honour).
	p.Delay = a.Waited
	if j.stepSet {
		p.Delay = j.step.Charged(p.Delay)
	}
	p.Delay = c.round(p.Delay)
	spent := AddDuration(j.track.Spent().Time, p.Delay)
	var d Decision
	if a.Estimate != nil {
		d, p.Spent = DecideHeld(c.Budget, j.track.Spent(), spent, *a.Estimate, a.Held)
	} else {
		d, p.Spent = j.track.BeforeHeld(c.Budget, st.Name, spent, st.Reserve, a.Held)
	}
	switch {
	case j.stepSet && !j.step.Retry:
		d = RefuseFirst(j.step.Reason, d)
	case narrow:
		// No seat from the job's own has a larger window: the prompt's
		// length fails identically everywhere left.
		d = RefuseFirst(ReasonPermanentError, d)
	case open:
		d = Refuse(ReasonBreakerOpen)
	}
	if d.Admit && j.clocked {
		if p.Hard = min(c.Hard, j.deadline.Sub(a.Now)); p.Hard <= 0 {
			// Less than the log's resolution is left: the gate saw a
			// sliver of the deadline that the clock has already spent.
			d = Refuse(ReasonDeadline)
		}
	}
	// Last, the retry budget: a retry everything else admits, when the
	// retries of every job are over it. A first attempt only counts.
	if d.Admit && p.Retry && c.RetryGate != nil {
		d, p.Window = c.RetryGate.Decide(d, true, a.Now)
		p.HasWindow = true
	}
	p.Decision = d
	if !d.Admit {
		p.Hard = 0
		return
	}
	if c.RetryGate != nil {
		c.RetryGate.Sent(a.Now, p.Retry)
	}
	br := st.Breaker
	p.Probe = br.State(a.Now) == HalfOpen
	br.Allow(a.Now)
	j.seat = s
}

// Settle is an attempt's end at now on the chain's seat s, before its row
// is written: its billing class (when the seat did not say), its cost on
// a priced seat from usage (a.USD; priced reports it), and its record in
// the seat's breaker (an operator's or client's cancel says nothing of
// the seat). It returns the row's note for a half-open probe.
func (j *Job) Settle(c *Chain, s int, now time.Time, a *Attempt, u Usage, probe bool) (priced bool, note string) {
	st := &c.Seats[s]
	if a.Billing == "" {
		a.Billing = BillingOf(a.Outcome, a.Elapsed, c.Retry.SlowServerAfter)
	}
	if st.Priced {
		a.USD, priced = Cost(st.Prices, u), true
	}
	if a.Outcome != Cancelled {
		st.Breaker.Record(now, a.Outcome.SeatFailure())
	}
	if probe {
		note = "half-open probe"
	}
	return priced, note
}

// MoveKind is what a job does after an attempt the machine took.
type MoveKind uint8

const (
	// Ended: the job has its answer (succeeded), or was cancelled.
	Ended MoveKind = iota
	// Again: retry on Seat after Delay.
	Again
	// Refused: no next attempt: the retry rules refuse it, or the gate
	// must refuse it whatever the wait (Decision.Final), which is said
	// now rather than after a pointless sleep.
	Refused
)

// Move is the machine's answer after an attempt: the job's next move.
type Move struct {
	Kind     MoveKind
	End      string        // Ended, Refused: the job's end if it stops here
	Decision Decision      // Refused
	Seat     int           // Again: where the retry goes; Refused: the seat whose estimate the gate saw
	Delay    time.Duration // Again: the wait before the retry; Refused: the wait the refusal saved
	Attempt  int           // Refused: the refusal row's number
	Spent    Spent         // Refused: the spend the refusal was made on
}

// Take takes a sent attempt into the job's books, as its row records it,
// and says what comes next: a success ends the job; a cancel ends it
// (the loop's Ctrl-C; the proxy's client may come back, and the retry
// rules' last answer stands); any other failure is judged by the retry
// rules, which set the wait (Retry-After wins over the backoff, drawn
// from r: nil leaves it 0) and the seat. A retry moves along the chain
// when its failure class prefers another seat (a timeout, a slow 5xx),
// or when the attempts the job has left are no more than the seats after
// this one, so that every later seat of the chain keeps an attempt.
// Before sleeping, an attempt the gate must refuse whatever the wait (the
// cap is reached, or the wait leaves too little of the deadline) is
// refused now.
func (j *Job) Take(c *Chain, s int, a *Attempt, r *rand.Rand) Move {
	j.track.Sent(a)
	switch a.Outcome {
	case OK:
		j.step, j.stepSet = RetryStep{}, false
		return Move{Kind: Ended, End: "succeeded", Seat: s}
	case Cancelled:
		return Move{Kind: Ended, End: "cancelled", Seat: s}
	}
	if a.Outcome == ClientError && a.ContextLength && !j.widened {
		// The prompt did not fit this seat's window: once, a seat
		// further on with a larger one, at once (nothing was generated).
		j.widened = true
		w := c.Seats[s].Window
		j.step, j.stepSet = RetryStep{Retry: true, Widen: true, Window: w}, true
		for t := s + 1; t < len(c.Seats); t++ {
			if c.Seats[t].Window > w {
				if d := j.track.Before(c.Budget, c.Seats[t].Name, j.track.Spent().Time, c.Seats[t].Reserve); d.Final() {
					return j.refused(d, t, 0)
				}
				j.seat = max(j.seat, t)
				return Move{Kind: Again, Seat: t}
			}
		}
		return j.refused(Refuse(ReasonPermanentError), s, 0)
	}
	step := j.track.Retry(c.Retry, a, r)
	j.step, j.stepSet = step, true
	if !step.Retry {
		return j.refused(Refuse(step.Reason), s, 0)
	}
	delay := c.round(step.Charged(0))
	next := s
	if next+1 < len(c.Seats) {
		left := c.Budget.MaxAttempts - j.track.Spent().Attempts
		if step.Fallback || left <= len(c.Seats)-1-s {
			next++
		}
	}
	if next < len(c.Seats) {
		st := &c.Seats[next]
		spent := AddDuration(j.track.Spent().Time, delay)
		if d := j.track.Before(c.Budget, st.Name, spent, st.Reserve); d.Final() {
			return j.refused(d, next, delay)
		}
	}
	j.seat = max(j.seat, next)
	return Move{Kind: Again, Seat: next, Delay: delay}
}

// refused numbers the row of a refusal after an attempt.
func (j *Job) refused(d Decision, seat int, delay time.Duration) Move {
	j.attempts++
	return Move{Kind: Refused, End: j.track.End(), Decision: d, Seat: seat, Delay: delay, Attempt: j.attempts, Spent: j.track.Spent()}
}

// Number numbers a row the driver writes for the job without a decision
// of the machine's (the operator stopped it; the proxy stopped): it
// returns the row's attempt number.
func (j *Job) Number() int {
	j.attempts++
	return j.attempts
}

func (c *Chain) round(d time.Duration) time.Duration {
	if c.Round == nil {
		return d
	}
	return c.Round(d)
}

// JobState is a job's state as a store keeps it between its attempts
// (the proxy's shared books, claim's state): enough to rebuild the job
// exactly. The books are not stored: they are rebuilt from the attempts
// they took, in order, so the estimate and the retry history are Track's
// own.
type JobState struct {
	Start    time.Time  `json:"start"`
	Deadline time.Time  `json:"deadline"`
	Sent     []Attempt  `json:"sent,omitempty"`
	Step     *RetryStep `json:"step,omitempty"`
	Seat     int        `json:"seat,omitempty"`
	Attempts int        `json:"attempts,omitempty"`
	// Spent, when set, is the spend the books started from (Restore):
	// the attempts in Sent add to it.
	Spent   *Spent `json:"spent,omitempty"`
	Widened bool   `json:"widened,omitempty"`
}

// State is the job as a store keeps it; sent are the attempts its books
// took, in order (a driver that stores its jobs keeps them: Take's
// attempts).
func (j *Job) State(sent []Attempt) JobState {
	s := JobState{Start: j.start, Deadline: j.deadline, Sent: sent, Seat: j.seat, Attempts: j.attempts, Widened: j.widened}
	if j.stepSet {
		step := j.step
		s.Step = &step
	}
	return s
}

// Load rebuilds the job from a stored state: its deadline as it was made,
// its books from the attempts they took.
func (j *Job) Load(s JobState) {
	j.Reset()
	if s.Spent != nil {
		j.track.Restore(*s.Spent)
	}
	for i := range s.Sent {
		j.track.Sent(&s.Sent[i])
	}
	j.start, j.deadline, j.clocked = s.Start, s.Deadline, !s.Start.IsZero()
	j.seat, j.attempts, j.widened = max(s.Seat, 0), max(s.Attempts, 0), s.Widened
	if s.Step != nil {
		j.step, j.stepSet = *s.Step, true
	}
}

// Wait is what is left at now of the wait the retry rules set after the
// job's last failure, for a driver that did not sleep it (the proxy,
// whose client's own retry comes sooner): it waits the rest, then asks
// Before. It is 0 when there is none, or when the gate must refuse the
// next attempt whatever the wait (as Take refuses before sleeping):
// nobody waits for a refusal.
func (j *Job) Wait(c *Chain, now time.Time) time.Duration {
	if !j.stepSet || !j.step.Retry || len(c.Seats) == 0 {
		return 0
	}
	waited := j.Waited(now)
	left := j.step.Delay - waited
	if left <= 0 {
		return 0
	}
	st := &c.Seats[min(j.seat, len(c.Seats)-1)]
	spent := AddDuration(j.track.Spent().Time, c.round(j.step.Charged(waited)))
	if d := j.track.Before(c.Budget, st.Name, spent, st.Reserve); d.Final() {
		return 0
	}
	return left
}
