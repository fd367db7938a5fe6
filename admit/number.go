package admit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The one reading of a count, an amount and a rate from a person or a log
// (flags, env, config, rehearsal.log, latency models): plain decimals
// only, as a person writes them; never hex, underscores, inf or nan.

// ParseCount takes a whole, non-negative decimal number up to MaxTokens.
func ParseCount(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty count")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && s[0] != '-':
		return 0, fmt.Errorf("count over %d %q", MaxTokens, Shorten(s))
	case n < 0, err != nil && len(s) > 1 && s[0] == '-' && strings.Trim(s[1:], "0123456789") == "":
		return 0, fmt.Errorf("negative count %q", Shorten(s))
	case err != nil:
		return 0, fmt.Errorf("not a whole number %q", Shorten(s))
	case n > MaxTokens:
		return 0, fmt.Errorf("count over %d %q", MaxTokens, Shorten(s))
	}
	return n, nil
}

// ParseNumber takes a finite decimal number: digits, one point, an
// exponent, a sign.
func ParseNumber(s string) (float64, error) {
	s = strings.TrimSpace(s)
	_, ok := ParseDecimal(s) // the grammar; ParseFloat then reads it
	f, err := strconv.ParseFloat(s, 64)
	if !ok || err != nil || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a number %q", Shorten(s))
	}
	return f, nil
}

// ParseAmount takes a non-negative amount (USD, a ratio) up to MaxUSD; a
// leading "$" is allowed.
func ParseAmount(s string) (float64, error) {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "$"))
	if s == "" {
		return 0, errors.New("empty number")
	}
	f, err := ParseNumber(s)
	switch {
	case err != nil:
		return 0, err
	case f < 0:
		return 0, fmt.Errorf("negative number %q", Shorten(s))
	case f > MaxUSD:
		return 0, fmt.Errorf("number %q is too large", Shorten(s))
	}
	return f, nil
}

// ParseRate takes a share of calls as a fraction or a percentage ("0.05",
// "5%"), between 0 and 1.
func ParseRate(s string) (float64, error) {
	s = strings.TrimSpace(s)
	num, pct := strings.CutSuffix(s, "%")
	f, err := ParseNumber(num)
	if err != nil {
		return 0, fmt.Errorf("not a rate %q (want e.g. 0.05 or 5%%)", Shorten(s))
	}
	if pct {
		f /= 100
	}
	if f < 0 || f > 1 || math.Signbit(f) {
		if pct {
			return 0, fmt.Errorf("must be between 0%% and 100%%, got %s", Shorten(s))
		}
		return 0, fmt.Errorf("must be between 0 and 1, got %s", Shorten(s))
	}
	return f, nil
}

// Shorten keeps an error's echo of a value short: at most 40 bytes of
// it, cut at a whole character, and an ellipsis.
func Shorten(s string) string {
	if len(s) > 40 {
		return strings.ToValidUTF8(s[:40], "") + "…"
	}
	return s
}

// Prices is a seat's rate card in USD per million tokens: In for input,
// Out for output (reasoning included), CachedIn for input read from the
// provider's prompt cache and CacheWrite for input written to it. A
// config that sets neither cache price has both equal to In
// (seat.Config.Prices), and prices exactly as In and Out alone.
type Prices struct{ In, Out, CachedIn, CacheWrite float64 }

// Usage is an attempt's tokens as the log keeps them: Prompt is all
// input and Completion all output; Cached and CacheWrite are the parts
// of Prompt read from and written to the cache (0 when not reported).
type Usage struct{ Prompt, Completion, Cached, CacheWrite int64 }

// Cost is what usage costs at a rate card: the input read from the cache
// at CachedIn, the input written to it at CacheWrite, the rest of the
// input at In and the output at Out, clamped like every outside figure
// (limits.go). Parts larger than the prompt are cut to it, reads first.
// This is the one cost function: cost_usd, the spend ceiling's
// reservation, the retry tax and simulate all come from it.
func Cost(p Prices, u Usage) float64 {
	prompt := ClampTokens(u.Prompt)
	cached := min(ClampTokens(u.Cached), prompt)
	written := min(ClampTokens(u.CacheWrite), prompt-cached)
	fresh := prompt - cached - written
	// Adding a zero part changes no bit: without parts this is exactly
	// (prompt × In + completion × Out) / 1e6, as before there were parts.
	sum := float64(fresh) * p.In
	if cached > 0 {
		sum += float64(cached) * p.CachedIn
	}
	if written > 0 {
		sum += float64(written) * p.CacheWrite
	}
	return ClampUSD((sum + float64(ClampTokens(u.Completion))*p.Out) / 1e6)
}

// Closest is the one "did you mean": the candidate nearest name (case
// ignored) when it is near enough to be a typo of it — fewer edits than
// half the name's length, and at most 3, so "rehersal" is "rehearse" but
// "base" is not "name" — or, failing that, the first candidate that name
// (3 letters or more) begins.
func Closest(name string, candidates []string) (string, bool) {
	ln := strings.ToLower(name)
	limit := min((len([]rune(ln))-1)/2, 3)
	best, bestD := "", limit+1
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if lc == ln || abs(len(lc)-len(ln)) > limit {
			continue // lengths this far apart are more edits than the limit
		}
		if d := editDistance(ln, lc); d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	if best != "" {
		return best, true
	}
	if len(ln) >= 3 {
		for _, c := range candidates {
			if lc := strings.ToLower(c); lc != ln && strings.HasPrefix(lc, ln) {
				return c, true
			}
		}
	}
	return "", false
}

func abs(n int) int { return max(n, -n) }

// editDistance is the optimal-string-alignment distance: insertions,
// deletions, substitutions and swaps of two neighbours each cost one, so
// "rehersal" is two edits from "rehearse".
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2, prev, cur := make([]int, len(rb)+1), make([]int, len(rb)+1), make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
