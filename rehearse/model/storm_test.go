package model

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// planLoaded is call n's plan with busy calls in flight.
func planLoaded(lp seat.LoadPlanner, n, busy int) seat.Plan {
	var p seat.Plan
	lp.PlanLoadedTo(&p, n, busy)
	return p
}

// TestSlotsStretchAnswersPastTheSeat: slots=2 serves two calls at full
// speed; the fourth call in flight takes twice as long. Fast failures,
// refused connections and hangs are not slowed.
func TestSlotsStretchAnswersPastTheSeat(t *testing.T) {
	lp := mustParse(t, "fixed elapsed=2s ttft=500ms slots=2").Planner(1, 0).(seat.LoadPlanner)
	assert.Equal(t, 2*time.Second, planLoaded(lp, 0, 2).Elapsed)
	p := planLoaded(lp, 0, 4)
	assert.Equal(t, 4*time.Second, p.Elapsed)
	assert.Equal(t, time.Second, p.Wait)
	fail := mustParse(t, "fixed elapsed=2s 5xx=100% slots=1").Planner(1, 0).(seat.LoadPlanner)
	assert.Equal(t, 200*time.Millisecond, planLoaded(fail, 0, 50).Elapsed)
	assert.Equal(t, "fixed elapsed=2s ttft=500ms slots=2", mustParse(t, "fixed elapsed=2s ttft=500ms slots=2").String())
}

// stormPolicy retries timeouts three times with no breaker: nothing but
// a retry budget stops a storm.
func stormPolicy() rehearse.Policy {
	p := rehearse.DefaultPolicy()
	p.Budget = admit.Budget{Deadline: time.Minute, TokenCeiling: 20000, MaxAttempts: 4, MaxWait: 20 * time.Second}
	p.Retry.BaseDelay, p.Retry.MaxDelay, p.Retry.TimeoutsRetried = 200*time.Millisecond, 2*time.Second, 3
	p.Timeouts = rehearse.Timeouts{Soft: 6 * time.Second, Hard: 10 * time.Second}
	p.Breaker.FailureRate = 0
	return p
}

// TestRetryBudgetStopsAStorm: a minute at 13 jobs/s saturates a 24-slot
// seat; its timeouts' retries keep it saturated when the rate is back at
// 8/s (a metastable storm). The retry budget refuses the retries over
// 10% of first attempts: the retry share of the last minutes falls back
// to its level before the burst, and attempts per job toward 1.
func TestRetryBudgetStopsAStorm(t *testing.T) {
	m := mustParse(t, "lognormal p50=2s p99=8s 5xx=5% tokens=2100 prompt=1500 slots=24")
	chain := []seat.Config{{Name: "s", Model: "m", PriceIn: 0.15, PriceOut: 0.6}}
	ramp := []rehearse.Step{{Rate: 8, For: time.Minute}, {Rate: 13, For: time.Minute}, {Rate: 8, For: time.Minute},
		{Rate: 8, For: time.Minute}, {Rate: 8, For: time.Minute}}
	run := func(p rehearse.Policy) *Summary {
		s, err := Run(Sim{Policy: p, Seats: []rehearse.SeatSpec{{Config: chain[0], Planner: m.Planner(1, 0)}},
			Ramp: ramp, Seed: 1, Steps: time.Minute})
		require.NoError(t, err)
		require.Len(t, s.Steps, len(ramp)+1) // answers end after the last arrival
		return s
	}
	storm := run(stormPolicy())
	p := stormPolicy()
	p.Retry.Budget = admit.RetryBudgetConfig{Ratio: 0.1, MinPerSecond: 0.5, Window: 10 * time.Second}
	budgeted := run(p)

	before := storm.Steps[0].RetryShare
	assert.Greater(t, float64(storm.Steps[4].RetryShare), 0.5, "without a budget the storm outlives the burst")
	assert.Less(t, float64(budgeted.Steps[4].RetryShare), 2*float64(before)+0.05, "with the budget the retry share is back")
	assert.Greater(t, float64(budgeted.Steps[4].Goodput), 2*float64(storm.Steps[4].Goodput))
	assert.Less(t, float64(budgeted.AttemptsPerJob), 1.2)
	assert.Greater(t, float64(storm.AttemptsPerJob), 2.0)
	assert.Less(t, float64(budgeted.CostPerJob), float64(storm.CostPerJob))
	assert.Positive(t, budgeted.Refusals["retry budget"])
	assert.Zero(t, storm.Refusals["retry budget"])
}

// TestPlanLoadedToLeavesNothingOfTheLast: the virtual driver draws each
// call's plan into its seat's one plan, so a call after a reset, a 429 or
// a hang carries nothing of it.
func TestPlanLoadedToLeavesNothingOfTheLast(t *testing.T) {
	lp := mustParse(t, "lognormal p50=2.1s p99=14s hang=5% 429=10% 5xx=10% reset=10% tokens=2100 prompt=1500 slots=2").Planner(1, 0).(seat.LoadPlanner)
	used := seat.Plan{Incomplete: "left", ErrorCode: "left", HasRetryAfter: true, RetryAfter: time.Minute, Hang: true, ConnError: true,
		ResetAfter: time.Minute, Status: 599, HasCached: true, CachedTokens: 7, NoUsage: true}
	for n := range 200 {
		lp.PlanLoadedTo(&used, n, 1+n%4)
		assert.Equal(t, planLoaded(lp, n, 1+n%4), used, "call %d", n)
	}
}
