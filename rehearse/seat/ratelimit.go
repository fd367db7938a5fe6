package seat

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"retrygate/admit"
)

// rateLimit reads a response's rate-limit headers into the log's one
// form (admit.RateLimit), beside retryAfter, which reads Retry-After and
// retry-after-ms. Two families are known:
//
//   - OpenAI (and compatible servers that copy it): x-ratelimit-remaining-
//     requests|tokens, counts, and x-ratelimit-reset-requests|tokens,
//     durations in Go's form ("6m0s", "1s", "20ms");
//   - Anthropic: anthropic-ratelimit-requests|tokens|input-tokens|
//     output-tokens-remaining, counts, and the same names with -reset,
//     RFC 3339 times, measured from the response's Date header (or now()
//     without one), as an HTTP-date Retry-After is.
//
// Remaining tokens are the tokens limit's, or for Anthropic without one
// the tighter of its input and output limits. The reset is when the limit
// that ran out (remaining 0) resets, the latest of them when several did,
// and the latest of all when none did: no limit reported is open before
// then. Resets are clamped into [0, admit.MaxDuration] like Retry-After; a
// value that does not parse is not reported.
func rateLimit(h http.Header, now func() time.Time) admit.RateLimit {
	var rl admit.RateLimit
	if h.Get("X-Ratelimit-Remaining-Requests") != "" || h.Get("X-Ratelimit-Remaining-Tokens") != "" ||
		h.Get("X-Ratelimit-Reset-Requests") != "" || h.Get("X-Ratelimit-Reset-Tokens") != "" {
		lims := []limit{
			openaiLimit(h, "requests"),
			openaiLimit(h, "tokens"),
		}
		rl.RemainingRequests, rl.HasRequests = lims[0].remaining, lims[0].hasRemaining
		rl.RemainingTokens, rl.HasTokens = lims[1].remaining, lims[1].hasRemaining
		rl.Reset, rl.HasReset = resetOf(lims)
		return rl
	}
	base := func() time.Time {
		if d, err := http.ParseTime(h.Get("Date")); err == nil {
			return d
		}
		return now()
	}
	lims := make([]limit, 0, 4)
	for _, name := range [...]string{"requests", "tokens", "input-tokens", "output-tokens"} {
		lims = append(lims, anthropicLimit(h, name, base))
	}
	rl.RemainingRequests, rl.HasRequests = lims[0].remaining, lims[0].hasRemaining
	rl.RemainingTokens, rl.HasTokens = lims[1].remaining, lims[1].hasRemaining
	if !rl.HasTokens {
		for _, l := range lims[2:] {
			if l.hasRemaining && (!rl.HasTokens || l.remaining < rl.RemainingTokens) {
				rl.RemainingTokens, rl.HasTokens = l.remaining, true
			}
		}
	}
	rl.Reset, rl.HasReset = resetOf(lims)
	return rl
}

// limit is one rate limit's headers.
type limit struct {
	remaining              int64
	reset                  time.Duration
	hasRemaining, hasReset bool
}

func openaiLimit(h http.Header, name string) limit {
	var l limit
	l.remaining, l.hasRemaining = headerCount(h.Get("X-Ratelimit-Remaining-" + name))
	if v := strings.TrimSpace(h.Get("X-Ratelimit-Reset-" + name)); v != "" {
		// Go's duration form; a bare number is seconds, as in Retry-After.
		if f, ok := headerNumber(v); ok {
			l.reset, l.hasReset = admit.SecondsDuration(f), true
		} else if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			l.reset, l.hasReset = admit.ClampDuration(d), true
		}
	}
	return l
}

func anthropicLimit(h http.Header, name string, base func() time.Time) limit {
	var l limit
	l.remaining, l.hasRemaining = headerCount(h.Get("Anthropic-Ratelimit-" + name + "-Remaining"))
	if v := strings.TrimSpace(h.Get("Anthropic-Ratelimit-" + name + "-Reset")); v != "" {
		if at, err := time.Parse(time.RFC3339, v); err == nil {
			// Sub saturates at the int64 range: a year-9999 time clamps.
			l.reset, l.hasReset = admit.ClampDuration(at.Sub(base())), true
		}
	}
	return l
}

// headerCount reads a whole, non-negative count, clamped to admit's limit.
func headerCount(v string) (int64, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil && !strings.Contains(err.Error(), "out of range") || n < 0 {
		return 0, false
	}
	return admit.ClampTokens(n), true
}

// resetOf is the reset rateLimit reports (see there).
func resetOf(lims []limit) (time.Duration, bool) {
	var out, all time.Duration
	var hasOut, hasAll bool
	for _, l := range lims {
		if !l.hasReset {
			continue
		}
		all, hasAll = max(all, l.reset), true
		if l.hasRemaining && l.remaining == 0 {
			out, hasOut = max(out, l.reset), true
		}
	}
	if hasOut {
		return out, true
	}
	return all, hasAll
}
