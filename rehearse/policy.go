package rehearse

import (
	"path"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// Timeouts are seed 002's two numbers: soft shows "still waiting", hard
// cancels; and the stall window: once content has started, no byte for
// this long cuts the attempt (0: off).
type Timeouts struct {
	Soft  time.Duration
	Hard  time.Duration
	Stall time.Duration
}

// Policy is everything the attempt loop obeys.
type Policy struct {
	Budget   admit.Budget
	Retry    admit.RetryPolicy
	Timeouts Timeouts
	Fallback []string // seat names, in order; the first is where jobs start
	Breaker  admit.BreakerConfig
	// Routes choose a fallback chain by the model a job names: the first
	// route whose pattern matches wins; none matching, Fallback.
	Routes []Route
}

// Route is one entry of the policy's routes: the models it takes (an
// exact name, or a glob as path.Match reads it) and their chain.
type Route struct {
	Model    string
	Fallback []string // seat names, in order
}

// Route is the chain of the first route whose pattern matches model,
// and whether one did. It is the one place a chain is chosen by model.
func (p Policy) Route(model string) ([]string, bool) {
	for _, r := range p.Routes {
		if ok, _ := path.Match(r.Model, model); ok {
			return r.Fallback, true
		}
	}
	return nil, false
}

// ChainFor is the chain a job naming model runs: its route's, else the
// policy's own fallback.
func (p Policy) ChainFor(model string) []string {
	if names, ok := p.Route(model); ok {
		return names
	}
	return p.Fallback
}

// DefaultPolicy is what retrygate uses with no config at all. The README
// gives the reason for each number.
func DefaultPolicy() Policy {
	return Policy{
		Budget: admit.Budget{
			Deadline:     45 * time.Second, // seed 003: an interactive repair the caller can still use
			TokenCeiling: 8000,             // seed 003
			MaxAttempts:  2,                // seed 000/003: one retry, then stop
			MaxWait:      5 * time.Second,  // seed 003: the number that makes a free seat expensive
		},
		Retry: admit.RetryPolicy{
			BaseDelay:       500 * time.Millisecond, // seed 004's RetryPolicy
			MaxDelay:        8 * time.Second,        // seed 002/004
			SlowServerAfter: 10 * time.Second,       // a 5xx after this may have been generated: ambiguous
			HonorRetryAfter: true,                   // seed 004: Retry-After wins
			TimeoutsRetried: 1,                      // seed 001: retry timeouts at most once
		},
		Timeouts: Timeouts{Soft: 6 * time.Second, Hard: 25 * time.Second}, // seed 002
		Breaker: admit.BreakerConfig{
			Window:         30 * time.Second, // seed 002: 50% over a 30-second window
			FailureRate:    0.5,
			MinRequests:    5,
			Cooldown:       30 * time.Second,
			HalfOpenProbes: 1,
		},
	}
}

// Validate names the config key at fault.
func (p Policy) Validate() error {
	if err := p.Budget.Validate(); err != nil {
		return err
	}
	r := p.Retry
	switch {
	case r.BaseDelay < 0:
		return admit.KeyErrorf("retry.base_delay", "must not be negative, got %s", r.BaseDelay)
	case r.SlowServerAfter < 0:
		return admit.KeyErrorf("retry.slow_5xx_after", "must not be negative, got %s", r.SlowServerAfter)
	case p.Timeouts.Soft < 0:
		return admit.KeyErrorf("timeouts.soft", "must not be negative, got %s", p.Timeouts.Soft)
	case r.MaxDelay < r.BaseDelay:
		return admit.KeyErrorf("retry.max_delay", "%s is below retry.base_delay %s", r.MaxDelay, r.BaseDelay)
	case r.TimeoutsRetried < 0:
		return admit.KeyErrorf("retry.timeouts_retried", "must not be negative, got %d", r.TimeoutsRetried)
	case p.Timeouts.Hard <= 0:
		return admit.KeyErrorf("timeouts.hard", "must be positive, got %s", p.Timeouts.Hard)
	case p.Timeouts.Stall < 0:
		return admit.KeyErrorf("timeouts.stall", "must not be negative, got %s", p.Timeouts.Stall)
	case p.Timeouts.Soft > p.Timeouts.Hard:
		return admit.KeyErrorf("timeouts.soft", "%s is past timeouts.hard %s", p.Timeouts.Soft, p.Timeouts.Hard)
	}
	if err := r.Budget.Validate(); err != nil {
		return err
	}
	for i, rt := range p.Routes {
		if _, err := path.Match(rt.Model, ""); err != nil || rt.Model == "" {
			return admit.KeyErrorf(KeyRoutes, "[%d].model: %q is not a model name or glob", i, rt.Model)
		}
		if len(rt.Fallback) == 0 {
			return admit.KeyErrorf(KeyRoutes, "[%d].fallback: no seat", i)
		}
	}
	return p.Breaker.Validate()
}
