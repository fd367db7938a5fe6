package seat

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// limits reads OpenAI's rate-limit headers (and those of compatible
// servers that copy them): x-ratelimit-remaining-requests|tokens, counts,
// and x-ratelimit-reset-requests|tokens, durations in Go's form ("6m0s",
// "1s", "20ms").
func (openaiWire) limits(h http.Header, _ func() time.Time) admit.RateLimit {
	return rateLimitOf([]limit{openaiLimit(h, "requests"), openaiLimit(h, "tokens")})
}

// limits reads Anthropic's rate-limit headers:
// anthropic-ratelimit-requests|tokens|input-tokens|output-tokens-remaining,
// counts, and the same names with -reset, RFC 3339 times, measured from
// the response's Date header (or now() without one), as an HTTP-date
// Retry-After is. Without a tokens limit, remaining tokens are the
// tighter of the input and output limits.
func (anthropicWire) limits(h http.Header, now func() time.Time) admit.RateLimit {
	base := responseDate(h, now)
	lims := make([]limit, 0, 4)
	for _, name := range [...]string{"requests", "tokens", "input-tokens", "output-tokens"} {
		lims = append(lims, anthropicLimit(h, name, base))
	}
	rl := rateLimitOf(lims)
	if !rl.HasTokens {
		for _, l := range lims[2:] {
			if l.hasRemaining && (!rl.HasTokens || l.remaining < rl.RemainingTokens) {
				rl.RemainingTokens, rl.HasTokens = l.remaining, true
			}
		}
	}
	return rl
}

// limits: Ollama publishes no rate-limit headers.
func (ollamaWire) limits(http.Header, func() time.Time) admit.RateLimit { return admit.RateLimit{} }

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

func anthropicLimit(h http.Header, name string, base time.Time) limit {
	var l limit
	l.remaining, l.hasRemaining = headerCount(h.Get("Anthropic-Ratelimit-" + name + "-Remaining"))
	if v := strings.TrimSpace(h.Get("Anthropic-Ratelimit-" + name + "-Reset")); v != "" {
		if at, err := time.Parse(time.RFC3339, v); err == nil {
			// Sub saturates at the int64 range: a year-9999 time clamps.
			l.reset, l.hasReset = admit.ClampDuration(at.Sub(base)), true
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

// rateLimitOf is the log's one form (admit.RateLimit) of a response's
// rate limits: lims[0] is the requests limit's, lims[1] the tokens
// limit's. The reset is when the limit that ran out (remaining 0) resets,
// the latest of them when several did, and the latest of all when none
// did: no limit reported is open before then. Resets are clamped into [0,
// admit.MaxDuration] like Retry-After (retryAfter); a value that does not
// parse is not reported.
func rateLimitOf(lims []limit) admit.RateLimit {
	rl := admit.RateLimit{
		RemainingRequests: lims[0].remaining, HasRequests: lims[0].hasRemaining,
		RemainingTokens: lims[1].remaining, HasTokens: lims[1].hasRemaining,
	}
	var out, all time.Duration
	var hasOut bool
	for _, l := range lims {
		if !l.hasReset {
			continue
		}
		all, rl.HasReset = max(all, l.reset), true
		if l.hasRemaining && l.remaining == 0 {
			out, hasOut = max(out, l.reset), true
		}
	}
	rl.Reset = all
	if hasOut {
		rl.Reset = out
	}
	return rl
}
