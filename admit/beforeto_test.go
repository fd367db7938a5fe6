package admit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestJobBeforeToIsBefore: the attempt loop makes each attempt's plan in
// the job's one plan, so nothing of the last plan (a window, a probe, a
// refusal's failing checks) may show on the next: two jobs alike, one
// planning with Before and one with BeforeTo into a used plan, plan
// alike through admits, retries and the attempt cap's refusal.
func TestJobBeforeToIsBefore(t *testing.T) {
	ca, cb := jobChain("primary", "fallback"), jobChain("primary", "fallback")
	var ja, jb Job
	ja.Start(jobT0, ca.Budget.Deadline)
	jb.Start(jobT0, cb.Budget.Deadline)
	ra, rb := rand.New(rand.NewPCG(1, 1)), rand.New(rand.NewPCG(1, 1))
	used := Plan{Attempt: 9, Seat: 1, Probe: true, HasWindow: true, Window: BudgetWindow{Retries: 3}, Widen: true, Hard: time.Hour,
		Decision: Decision{Reason: ReasonSpendCeiling, Failing: []Reason{ReasonSpendCeiling, ReasonDeadline}}}
	now := jobT0
	for i := range 5 {
		want := ja.Before(ca, Ask{Now: now, Waited: ja.Waited(now)})
		jb.BeforeTo(&used, cb, Ask{Now: now, Waited: jb.Waited(now)})
		assert.Equal(t, want, used, "attempt %d", i+1)
		if !want.Decision.Admit {
			break
		}
		for _, s := range []struct {
			j *Job
			c *Chain
			r *rand.Rand
		}{{&ja, ca, ra}, {&jb, cb, rb}} {
			a := sent(s.c.Seats[want.Seat].Name, RateLimited, 100*time.Millisecond)
			s.j.Settle(s.c, want.Seat, now, a, Usage{}, want.Probe)
			s.j.Take(s.c, want.Seat, a, s.r)
		}
		now = now.Add(time.Second)
	}
}
