package admit

import "time"

// Estimator keeps seed 003's conservative estimate of a seat's next
// attempt, one observation at a time: wait = the last observed wait (an
// attempt cut off before its first byte counts as a wait of at least its
// length); elapsed = the last elapsed of an attempt that returned bytes
// (an answer, an error body, or a stream the server broke off — not our
// own cut-off); tokens = the last prompt + the last completion count.
// The attempt loop and `admit --log` both use it, so they agree.
type Estimator struct {
	wait, elapsed      time.Duration
	prompt, completion int64
}

// Observe takes one sent attempt. firstByte is false when no byte of the
// answer ever came (then wait is not an observation).
func (e *Estimator) Observe(o Outcome, wait time.Duration, firstByte bool, elapsed time.Duration, prompt, completion int64) {
	switch {
	case firstByte:
		e.wait = wait
	case o == Timeout || o == WaitCap:
		e.wait = max(wait, elapsed)
	}
	switch o {
	case OK, RateLimited, ClientError, ServerError, Reset:
		e.elapsed = elapsed
	}
	if prompt > 0 {
		e.prompt = prompt
	}
	if completion > 0 {
		e.completion = completion
	}
}

// Next is the estimate; USD is left to the caller, who knows the prices.
func (e *Estimator) Next() Next {
	return Next{Wait: e.wait, Elapsed: e.elapsed, Tokens: e.prompt + e.completion}
}

// Tokens returns the last prompt and completion counts.
func (e *Estimator) Tokens() (prompt, completion int64) { return e.prompt, e.completion }
