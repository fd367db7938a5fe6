package admit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var budgetT0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// TestRetryBudgetBoundary: ratio 0.2, floor 0.1/s over 10 s (one retry):
// ten first attempts allow 0.2·10 + 1 = 3 retries in the window. The
// third is admitted (equality admits), the fourth refused.
func TestRetryBudgetBoundary(t *testing.T) {
	cfg := RetryBudgetConfig{Ratio: 0.2, MinPerSecond: 0.1, Window: 10 * time.Second}
	b := NewRetryBudget(cfg)
	at := func(ms int) time.Time { return budgetT0.Add(time.Duration(ms) * time.Millisecond) }
	for i := range 10 {
		d, _ := b.Decide(Decision{Admit: true}, false, at(i))
		require.True(t, d.Admit)
		b.Sent(at(i), false)
	}
	for i := range 3 {
		d, w := b.Decide(Decision{Admit: true}, true, at(100+i))
		require.True(t, d.Admit, "retry %d of 3 allowed (%+v)", i+1, w)
		b.Sent(at(100+i), true)
	}
	d, w := b.Decide(Decision{Admit: true}, true, at(200))
	assert.Equal(t, "refuse: retry budget", d.String())
	assert.Equal(t, BudgetWindow{Firsts: 10, Retries: 3}, w)
	assert.Equal(t, []Reason{ReasonRetryBudget}, d.Failing)

	// First attempts are never refused, however far over budget.
	d, _ = b.Decide(Decision{Admit: true}, false, at(200))
	assert.True(t, d.Admit)
	// A refusal keeps the job's own reason.
	d, _ = b.Decide(Refuse(ReasonDeadline), true, at(200))
	assert.Equal(t, "refuse: deadline", d.String())
}

// TestRetryBudgetWindowForgets: a send exactly one window old has left
// the window, as in the breaker; one a millisecond younger still counts.
func TestRetryBudgetWindowForgets(t *testing.T) {
	cfg := RetryBudgetConfig{Ratio: 0, MinPerSecond: 0.1, Window: 10 * time.Second} // one retry per window
	b := NewRetryBudget(cfg)
	b.Sent(budgetT0, true)
	d, w := b.Decide(Decision{Admit: true}, true, budgetT0.Add(10*time.Second-time.Millisecond))
	assert.False(t, d.Admit)
	assert.Equal(t, 1, w.Retries)
	d, w = b.Decide(Decision{Admit: true}, true, budgetT0.Add(10*time.Second))
	assert.True(t, d.Admit)
	assert.Equal(t, 0, w.Retries)
}

// TestRetryBudgetOff: with no window the budget refuses nothing and
// counts nothing: today's policies decide exactly as before.
func TestRetryBudgetOff(t *testing.T) {
	b := NewRetryBudget(RetryBudgetConfig{})
	for i := range 100 {
		b.Sent(budgetT0.Add(time.Duration(i)), true)
	}
	d, w := b.Decide(Decision{Admit: true}, true, budgetT0.Add(time.Second))
	assert.True(t, d.Admit)
	assert.Equal(t, BudgetWindow{}, w)
}

// TestRetryBudgetNoFloor: ratio 0.5 with no floor: no retry before any
// first attempt, one per two first attempts after.
func TestRetryBudgetNoFloor(t *testing.T) {
	cfg := RetryBudgetConfig{Ratio: 0.5, Window: time.Minute}
	assert.False(t, cfg.Admits(BudgetWindow{}))
	assert.False(t, cfg.Admits(BudgetWindow{Firsts: 1}))
	assert.True(t, cfg.Admits(BudgetWindow{Firsts: 2}))
	assert.False(t, cfg.Admits(BudgetWindow{Firsts: 2, Retries: 1}))
	assert.True(t, cfg.Admits(BudgetWindow{Firsts: 4, Retries: 1}))
}

func TestRetryBudgetValidate(t *testing.T) {
	for _, tt := range []struct {
		cfg  RetryBudgetConfig
		want string
	}{
		{RetryBudgetConfig{}, ""},
		{RetryBudgetConfig{Ratio: 0.2, MinPerSecond: 1, Window: 10 * time.Second}, ""},
		{RetryBudgetConfig{Ratio: -0.1, Window: time.Second}, "retry.budget.ratio"},
		{RetryBudgetConfig{MinPerSecond: -1, Window: time.Second}, "retry.budget.min_per_s"},
		{RetryBudgetConfig{Window: -time.Second}, "retry.budget.window"},
		{RetryBudgetConfig{Ratio: 0.2}, "retry.budget.window: must be positive"},
	} {
		err := tt.cfg.Validate()
		if tt.want == "" {
			assert.NoError(t, err)
			continue
		}
		assert.ErrorContains(t, err, tt.want)
	}
}

// TestRetryBudgetStateRoundTrip: a window stored and restored (the
// proxies' shared books) counts the same, to the millisecond, and the
// stored state holds only the sends still in the window.
func TestRetryBudgetStateRoundTrip(t *testing.T) {
	cfg := RetryBudgetConfig{Ratio: 0.5, Window: 10 * time.Second}
	b := NewRetryBudget(cfg)
	b.Sent(budgetT0, false) // leaves the window by budgetT0+10s
	b.Sent(budgetT0.Add(3*time.Second), false)
	b.Sent(budgetT0.Add(4*time.Second), true)
	now := budgetT0.Add(10 * time.Second)
	s := b.State(now)
	assert.Equal(t, BudgetState{Firsts: []int64{budgetT0.Add(3 * time.Second).UnixMilli()}, Retries: []int64{budgetT0.Add(4 * time.Second).UnixMilli()}}, s)
	back := RestoreBudget(cfg, s)
	assert.Equal(t, b.Window(now), back.Window(now))
	assert.Equal(t, BudgetWindow{Firsts: 1, Retries: 1}, back.Window(now))
}
