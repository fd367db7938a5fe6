package admit

import (
	"errors"
	"fmt"
	"math"
)

// Seed 001's and 004's cost arithmetic, as pure functions. Rates are
// fractions in [0, 1); the caller validates with CheckRate so a bad
// value is named before any number is printed.

// ExpectedAttempts is the expected number of billed attempts per logical
// request when each attempt fails before generation with probability f
// and up to n retries follow: Σ_{i=0..n} f^i = (1 − f^(n+1)) / (1 − f).
// f = 0.05, n = 3 → 1.0526.
func ExpectedAttempts(f float64, n int) float64 {
	if n < 0 {
		n = 0
	}
	if f == 1 {
		return float64(n + 1) // the limit of the sum: every attempt is made
	}
	return (1 - math.Pow(f, float64(n+1))) / (1 - f)
}

// AttemptsCeiling is ExpectedAttempts as n → ∞: 1 / (1 − f). With a small
// f more retries barely change the cost (f = 0.2 caps at 1.25).
func AttemptsCeiling(f float64) float64 { return 1 / (1 - f) }

// TimeoutSurcharge is C·(1 + t): the expected cost per logical request
// when a fraction t of requests time out on the client yet complete (and
// are billed) on the server, and are sent again.
func TimeoutSurcharge(c, t float64) float64 { return c * (1 + t) }

// FailoverPreGeneration is C1 + f·C2: the first leg fails before
// generation with probability f (billed nothing) and the second leg runs.
func FailoverPreGeneration(c1, c2, f float64) float64 { return c1 + f*c2 }

// FailoverAfterTimeout is seed 001's C1 + t·(C1 + C2) for a first leg that
// times out after generation with probability t and is billed in full.
// Written as the seed writes it: for the timed-out share it counts the
// first leg a second time, so it is the pessimistic figure (it also
// covers the seed's point that the legs that time out are the long,
// expensive ones).
func FailoverAfterTimeout(c1, c2, t float64) float64 { return c1 + t*(c1+c2) }

// CostPerSuccess is seed 004's effective cost per successful task:
// average attempt cost × attempts per success ($0.02 × 1.4 = $0.028).
func CostPerSuccess(attemptCost, attemptsPerSuccess float64) float64 {
	return attemptCost * attemptsPerSuccess
}

// RetryTax is the share of the cost per success that retries add:
// attempts per success − 1 (1.4 → 0.4, a 40% increase).
func RetryTax(attemptsPerSuccess float64) float64 { return attemptsPerSuccess - 1 }

// Layer is one retry layer between a user action and the provider (seed
// 004): the SDK, the application, the queue, a gateway. Attempts counts
// the first try, so a layer that does not retry has Attempts = 1.
type Layer struct {
	Name     string
	Attempts int
}

// LayersWorstCase is the number of provider calls one user action can
// make when every layer retries to its cap: the product (3 × 3 × 3 = 27).
// It saturates at math.MaxInt64 rather than overflowing.
func LayersWorstCase(layers []Layer) int64 {
	w := int64(1)
	for _, l := range layers {
		a := int64(max(l.Attempts, 1))
		if w > math.MaxInt64/a {
			return math.MaxInt64
		}
		w *= a
	}
	return w
}

// LayersExpectedCalls is the expected number of provider calls per user
// action when layers stack, each attempt at the provider failing
// independently with probability f. Layers are listed innermost first
// (the SDK that calls the provider, then whatever calls the SDK). An
// inner layer fails upward only when all of its tries failed, so layer i
// sees failures with q_i = f^(a_1·…·a_(i−1)) and retries them; by Wald's
// identity the expected calls are Π_i (1 − q_i^(a_i)) / (1 − q_i).
func LayersExpectedCalls(layers []Layer, f float64) float64 {
	calls, q := 1.0, f
	for _, l := range layers {
		a := max(l.Attempts, 1)
		calls *= ExpectedAttempts(q, a-1)
		q = math.Pow(q, float64(a))
	}
	return calls
}

// RetryOwners lists the layers that retry (Attempts > 1). Seed 004: exactly
// one layer should own the retry budget.
func RetryOwners(layers []Layer) []string {
	var out []string
	for _, l := range layers {
		if l.Attempts > 1 {
			out = append(out, l.Name)
		}
	}
	return out
}

// ErrNotFinite is wrapped by CheckRate for NaN and ±Inf.
var ErrNotFinite = errors.New("not a finite number")

// CheckRate accepts a probability usable in the formulas: 0 <= v < 1
// (at 1 every attempt fails and the sums diverge). Errors say what was
// wrong, without a key; the caller adds the flag or key.
func CheckRate(v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%w: %v", ErrNotFinite, v)
	case v < 0:
		return fmt.Errorf("must not be negative, got %g", v)
	case v >= 1:
		return fmt.Errorf("must be below 1 (a rate of 1 means every attempt fails), got %g", v)
	}
	return nil
}
