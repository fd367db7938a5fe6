package admit

import (
	"math"
	"time"
)

// ReasonRetryBudget refuses a retry when the retries of all jobs together
// are over the policy's retry budget. First attempts are never refused by it.
const ReasonRetryBudget Reason = "retry budget"

// RetryBudgetConfig is retry.budget, Finagle's RetryBudget: over any
// rolling window, the retries sent may be at most Ratio × the first
// attempts sent plus a floor of MinPerSecond × the window's seconds (so a
// quiet service can still retry its rare failure). Envoy's retry_budget
// counts requests in flight instead, and gRPC's throttling a token
// bucket; a count over a window is the one a log replays from its rows.
type RetryBudgetConfig struct {
	Ratio        float64       // retries allowed per first attempt (0.2: one retry in five requests)
	MinPerSecond float64       // the floor, in retries per second of the window
	Window       time.Duration // how far back the counts go
}

// Enabled reports whether the policy has a retry budget: off when unset.
func (c RetryBudgetConfig) Enabled() bool { return c.Window > 0 }

// Validate names the key at fault.
func (c RetryBudgetConfig) Validate() error {
	switch {
	case c.Window < 0:
		return KeyErrorf("retry.budget.window", "must not be negative, got %s", c.Window)
	case c.Ratio < 0 || math.IsNaN(c.Ratio) || math.IsInf(c.Ratio, 0):
		return KeyErrorf("retry.budget.ratio", "must be a fraction of at least 0, got %g", c.Ratio)
	case c.MinPerSecond < 0 || math.IsNaN(c.MinPerSecond) || math.IsInf(c.MinPerSecond, 0):
		return KeyErrorf("retry.budget.min_per_s", "must not be negative, got %g", c.MinPerSecond)
	case c.Window == 0 && (c.Ratio > 0 || c.MinPerSecond > 0):
		return KeyErrorf("retry.budget.window", "must be positive when retry.budget.ratio or min_per_s is set")
	}
	return nil
}

// BudgetWindow is the retry budget's input: the first attempts and the
// retries of every job sent in the window before the decision. A log row
// the budget judged carries it (window_firsts, window_retries), so a
// replay judges the row on what the writer counted.
type BudgetWindow struct {
	Firsts  int
	Retries int
}

// Allowed is how many retries the window allows: Ratio × Firsts + the floor.
func (c RetryBudgetConfig) Allowed(w BudgetWindow) float64 {
	return c.Ratio*float64(w.Firsts) + c.MinPerSecond*c.Window.Seconds()
}

// Admits reports whether one more retry stays within the budget: the
// window's retries plus this one at most Allowed. Equality admits.
func (c RetryBudgetConfig) Admits(w BudgetWindow) bool {
	return float64(w.Retries)+1 <= c.Allowed(w)+1e-9
}

// Apply is the retry budget after the job's own checks: a retry (retry
// true: the job's attempt 2 or later) that everything else admits is
// refused when the window is over budget. Every other decision passes
// unchanged: a first attempt is never refused by the budget, and a
// refusal keeps the job's own reason.
func (c RetryBudgetConfig) Apply(d Decision, retry bool, w BudgetWindow) Decision {
	if !c.Enabled() || !retry || !d.Admit || c.Admits(w) {
		return d
	}
	return Decision{Reason: ReasonRetryBudget, Failing: []Reason{ReasonRetryBudget}, Remaining: d.Remaining}
}

// RetryBudget keeps the window's counts from the attempts sent, time
// passed in. It is not safe for concurrent use: its callers serialise.
type RetryBudget struct {
	cfg     RetryBudgetConfig
	firsts  timeQueue
	retries timeQueue
}

// NewRetryBudget returns an empty window under cfg.
func NewRetryBudget(cfg RetryBudgetConfig) *RetryBudget { return &RetryBudget{cfg: cfg} }

// Config is the budget's policy.
func (b *RetryBudget) Config() RetryBudgetConfig { return b.cfg }

// Window is the counts at now: attempts sent after now − window and not
// after now (one exactly a window old has left, as in the breaker).
func (b *RetryBudget) Window(now time.Time) BudgetWindow {
	cut := now.Add(-b.cfg.Window)
	return BudgetWindow{Firsts: b.firsts.since(cut), Retries: b.retries.since(cut)}
}

// Sent counts an attempt sent at at: a retry, or a job's first attempt.
func (b *RetryBudget) Sent(at time.Time, retry bool) {
	if !b.cfg.Enabled() {
		return
	}
	q := &b.firsts
	if retry {
		q = &b.retries
	}
	q.push(at, at.Add(-b.cfg.Window), false)
}

// Decide is Apply on the window at now.
func (b *RetryBudget) Decide(d Decision, retry bool, now time.Time) (Decision, BudgetWindow) {
	w := b.Window(now)
	return b.cfg.Apply(d, retry, w), w
}

// timeQueue holds times, oldest first, some of them marked: sends for
// the retry budget, requests for a breaker with its failures marked
// (callers add in time order; one a little out of order only leaves a
// little late).
type timeQueue struct {
	at     []stamp
	head   int
	marked int // marked times after head
}

type stamp struct {
	at   time.Time
	mark bool
}

func (q *timeQueue) expire(cut time.Time) {
	for q.head < len(q.at) && !q.at[q.head].at.After(cut) {
		if q.at[q.head].mark {
			q.marked--
		}
		q.head++
	}
	if q.head > 1024 && q.head*2 > len(q.at) { // keep memory bounded
		q.at = append(q.at[:0], q.at[q.head:]...)
		q.head = 0
	}
}

func (q *timeQueue) push(at, cut time.Time, mark bool) {
	q.expire(cut)
	q.at = append(q.at, stamp{at, mark})
	if mark {
		q.marked++
	}
}

func (q *timeQueue) reset() { q.at, q.head, q.marked = q.at[:0], 0, 0 }

// len counts the times the last expiry left.
func (q *timeQueue) len() int { return len(q.at) - q.head }

// since counts the times after cut (and expires the rest).
func (q *timeQueue) since(cut time.Time) int {
	q.expire(cut)
	return len(q.at) - q.head
}

// BudgetState is a retry budget's window as a record others can share
// (the proxies' books): the send times still in it, in Unix milliseconds.
type BudgetState struct {
	Firsts  []int64 `json:"f,omitempty"`
	Retries []int64 `json:"r,omitempty"`
}

// State is the window's sends after now − window, to store.
func (b *RetryBudget) State(now time.Time) BudgetState {
	cut := now.Add(-b.cfg.Window)
	ms := func(q *timeQueue) []int64 {
		q.expire(cut)
		out := make([]int64, 0, len(q.at)-q.head)
		for _, t := range q.at[q.head:] {
			out = append(out, t.at.UnixMilli())
		}
		return out
	}
	return BudgetState{Firsts: ms(&b.firsts), Retries: ms(&b.retries)}
}

// RestoreBudget is a retry budget under cfg holding a stored window.
// Times are kept to the millisecond, as the log keeps durations.
func RestoreBudget(cfg RetryBudgetConfig, s BudgetState) *RetryBudget {
	b := NewRetryBudget(cfg)
	for _, ms := range s.Firsts {
		b.firsts.at = append(b.firsts.at, stamp{at: time.UnixMilli(ms)})
	}
	for _, ms := range s.Retries {
		b.retries.at = append(b.retries.at, stamp{at: time.UnixMilli(ms)})
	}
	return b
}
