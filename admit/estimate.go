package admit

import "time"

// Estimator keeps the conservative estimate of a seat's next attempt
// (DESIGN.md, the gate), one observation at a time:
//
//   - wait = the last observed wait on the seat: the wait of the last
//     attempt that produced a content byte or came back with an error
//     answer (a 429, a 4xx, a 5xx: its wait is how long the error took
//     to come back, and the next attempt may wait as long), or, for an
//     attempt cut off before its first content byte (timeout, wait cap,
//     Ctrl-C), its whole length; a reset before any content and a
//     failed connection observe no wait;
//   - gen = elapsed − wait of the last attempt that returned (an answer,
//     an error body, a stream the server broke off — not our own cut-off);
//     an answer with no content byte spent its whole elapsed;
//   - tokens = the last prompt count + the last completion count;
//   - USD = the last non-zero cost.
//
// Durations are taken as given: callers feed the log's own (millisecond)
// numbers, so a replay of the log sees exactly what the loop saw.
type Estimator struct {
	wait, gen          time.Duration
	prompt, completion int64
	usd                float64
	observed           bool
}

// Attempt is one sent attempt as the gate's bookkeeping sees it; the loop
// and every reader of the log build it from a log row
// (ledgerfile.AttemptOf), so both feed the same numbers.
type Attempt struct {
	Seat    string
	Outcome Outcome
	Billing Billing
	// Content reports that a content byte came: Wait is then its wait.
	// Without one, Wait is 0, or for a cut-off the cut's length.
	Content bool
	Wait    time.Duration
	Elapsed time.Duration // submit → last byte (or the cut)
	Delay   time.Duration // the backoff slept before it
	// Prompt and Completion are the split when known; Tokens the total.
	Prompt, Completion, Tokens int64
	USD                        float64
	RetryAfter                 time.Duration
	HasRetryAfter              bool
	// ContextLength: a client error that says the prompt is longer than
	// the seat's context window (ContextLength of its error code).
	ContextLength bool `json:",omitempty"`
}

// Returned reports whether bytes of an answer came back in full: an
// answer (an incomplete one too: it streamed to its end), an error body,
// or a stream the server broke off. Cut-offs of our own (timeout, wait
// cap, Ctrl-C) and connection failures did not return.
func (a *Attempt) Returned() bool {
	switch a.Outcome {
	case OK, Incomplete, RateLimited, ClientError, ServerError, Reset:
		return true
	}
	return false
}

// Observe takes one sent attempt.
func (e *Estimator) Observe(a *Attempt) {
	cut := a.Outcome == Timeout || a.Outcome == WaitCap || a.Outcome == Cancelled
	switch {
	case a.Content:
		e.wait = ClampDuration(a.Wait)
		e.observed = true
	case cut:
		e.wait = ClampDuration(max(a.Wait, a.Elapsed)) // at least its length
		e.observed = true
	case a.Outcome == RateLimited || a.Outcome == ClientError || a.Outcome == ServerError:
		e.wait = ClampDuration(a.Wait) // the error answer's first byte
		e.observed = true
	}
	if a.Returned() {
		if a.Content {
			e.gen = ClampDuration(a.Elapsed - a.Wait)
		} else {
			e.gen = ClampDuration(a.Elapsed)
		}
		e.observed = true
	}
	p, c := a.Prompt, a.Completion
	if p == 0 && c == 0 {
		p = a.Tokens // no split: the total stands for the prompt
	}
	if p > 0 {
		e.prompt = ClampTokens(p)
	}
	if c > 0 {
		e.completion = ClampTokens(c)
	}
	if a.USD > 0 {
		e.usd = ClampUSD(a.USD)
	}
}

// Observed reports whether any attempt has been observed. Before the
// first, the estimate is zero except for money, which the caller reserves
// (Reservation).
func (e *Estimator) Observed() bool { return e.observed }

// Next is the estimate.
func (e *Estimator) Next() Next {
	return Next{Wait: e.wait, Gen: e.gen, Tokens: AddTokens(e.prompt, e.completion), USD: e.usd}
}

// Reservation is what a first attempt reserves under a spend ceiling:
// its price × (the prompt counted locally + max_tokens), both sides of the
// rate card (DESIGN.md; the failover formula's worst case for one call).
// The cache cannot be assumed warm: no input is priced as a cache read,
// and all of it at the dearer of In and CacheWrite (a cold prompt may be
// written to the cache).
func Reservation(p Prices, promptTokens, maxTokens int64) float64 {
	if p.CacheWrite > p.In {
		return Cost(p, Usage{Prompt: promptTokens, Completion: maxTokens, CacheWrite: promptTokens})
	}
	return Cost(p, Usage{Prompt: promptTokens, Completion: maxTokens})
}
