package admit

import (
	"math/rand/v2"
	"time"
)

// RetryPolicy is the retry section of a policy.
type RetryPolicy struct {
	BaseDelay       time.Duration     // first backoff ceiling
	MaxDelay        time.Duration     // backoff ceiling cap
	SlowServerAfter time.Duration     // a 5xx after this long is ambiguous, retried at most once
	HonorRetryAfter bool              // a 429's Retry-After wins over computed backoff
	TimeoutsRetried int               // timed-out attempts retried at most this many times per job
	Budget          RetryBudgetConfig // retry.budget: the retries of all jobs together (off when unset)
}

// Backoff is full jitter: rand(0, min(max_delay, base_delay·2^(n−1))) for
// the n-th retry (n starts at 1). The source is injected so runs repeat.
func Backoff(p RetryPolicy, n int, r *rand.Rand) time.Duration {
	ceil := BackoffCeiling(p, n)
	if ceil <= 0 {
		return 0
	}
	return time.Duration(r.Int64N(int64(ceil) + 1))
}

// BackoffCeiling is min(max_delay, base_delay·2^(n−1)), without overflow.
func BackoffCeiling(p RetryPolicy, n int) time.Duration {
	if n < 1 {
		n = 1
	}
	c := p.BaseDelay
	for i := 1; i < n; i++ {
		if c >= p.MaxDelay || c > time.Duration(1<<62) {
			break
		}
		c *= 2
	}
	if p.MaxDelay > 0 && c > p.MaxDelay {
		c = p.MaxDelay
	}
	return c
}

// Failure is what the retry rules need to know about a failed attempt.
type Failure struct {
	Outcome    Outcome
	Billing    Billing
	RetryAfter time.Duration // server's Retry-After, when it sent one
	HasRetry   bool          // RetryAfter is set
}

// JobHistory counts the failures the retry rules limit per job.
type JobHistory struct {
	Retries    int // retries already scheduled (the next one is Retries+1)
	Timeouts   int // timeouts and wait-cap breaches so far, including this one
	SlowServer int // ambiguous (slow) 5xx so far, including this one
}

// RetryStep is the rules' answer after a failure.
type RetryStep struct {
	Retry    bool
	Reason   Reason        // when !Retry
	Delay    time.Duration // sleep before the next attempt
	Fallback bool          // prefer the next seat in the fallback chain
	// Widen: the failure was the prompt's length against the seat's
	// context window; the retry goes only to a seat whose declared window
	// is above Window, and only once per job.
	Widen  bool  `json:",omitempty"`
	Window int64 `json:",omitempty"`
}

// Charged is the wait the gate charges to the deadline before a retry
// after this step: the step's own delay (a Retry-After the rules honour,
// or the backoff drawn), or what the job waited since its last attempt
// when that is longer. The loop sleeps the step's delay (waited 0 when it
// decides before sleeping); a proxy's client keeps its own clock, and a
// retry it sends sooner than the delay is judged as if it had waited the
// delay out: the rest of the delay is counted against the deadline.
func (s RetryStep) Charged(waited time.Duration) time.Duration {
	if !s.Retry {
		return waited
	}
	return max(s.Delay, waited)
}

// AfterFailure applies the retry rules in order: permanent errors are
// never retried; ambiguous failures (timeouts, slow 5xx) at most
// TimeoutsRetried times, on the fallback seat; Retry-After wins over
// computed backoff; otherwise full jitter. A failure class that has used
// its retries is refused as "retry limit", never as "attempt cap" while
// attempts remain. Whether the sleep fits the deadline is the gate's check
// (Decide on the spend after the sleep): the caller owns the clock. A nil
// r leaves a computed backoff at 0, for replays that read the sleep from
// the log.
func AfterFailure(p RetryPolicy, f Failure, h JobHistory, r *rand.Rand) RetryStep {
	switch f.Outcome {
	case ClientError, Incomplete:
		return RetryStep{Reason: ReasonPermanentError}
	case Cancelled:
		return RetryStep{Reason: ReasonDeadline}
	}
	step := RetryStep{Retry: true}
	switch {
	case f.Outcome == Timeout || f.Outcome == WaitCap:
		if h.Timeouts > p.TimeoutsRetried {
			return RetryStep{Reason: ReasonRetryLimit}
		}
		step.Fallback = true
	case f.Outcome == ServerError && f.Billing == Ambiguous:
		if h.SlowServer > 1 {
			return RetryStep{Reason: ReasonRetryLimit}
		}
		step.Fallback = true
	}
	switch {
	case f.Outcome == RateLimited && f.HasRetry && p.HonorRetryAfter:
		step.Delay = f.RetryAfter
	case f.Outcome == ConnError:
		step.Delay = 0 // nothing reached the provider: retry promptly
	case r != nil:
		step.Delay = Backoff(p, h.Retries+1, r)
	}
	return step
}
