package admit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seed 003's budget: 45 s, 8000 tokens, 2 attempts, 5 s wait cap.
var seed003 = Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 2, MaxWait: 5 * time.Second}

func sec(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func TestDecideSeed003(t *testing.T) {
	// The seed's two worked rows.
	first := Decide(seed003, Spent{}, Next{Wait: sec(1.2), Gen: sec(6.0), Tokens: 2100})
	assert.Equal(t, "admit", first.String())
	assert.Equal(t, Remaining{Time: 45 * time.Second, Tokens: 8000, Attempts: 2, USD: 0}, first.Remaining)

	second := Decide(seed003, Spent{Time: sec(7.2), Tokens: 2100, Attempts: 1}, Next{Wait: sec(18), Gen: sec(9), Tokens: 2400})
	assert.Equal(t, "refuse: queue wait", second.String())
	assert.Equal(t, []Reason{ReasonQueueWait}, second.Failing)
	// "You then have 37.8 seconds and 5900 tokens left, with one attempt remaining."
	assert.Equal(t, sec(37.8), second.Remaining.Time)
	assert.Equal(t, int64(5900), second.Remaining.Tokens)
	assert.Equal(t, 1, second.Remaining.Attempts)
}

func TestDecideBoundaries(t *testing.T) {
	spend := Budget{Deadline: 10 * time.Second, TokenCeiling: 100, MaxAttempts: 3, MaxWait: 2 * time.Second, MaxSpendUSD: 0.10}
	tests := []struct {
		name    string
		b       Budget
		s       Spent
		n       Next
		want    string
		failing []Reason
	}{
		{"nothing spent", spend, Spent{}, Next{}, "admit", nil},
		{"attempts one below cap", spend, Spent{Attempts: 2}, Next{}, "admit", nil},
		{"attempts at cap", spend, Spent{Attempts: 3}, Next{}, "refuse: attempt cap", []Reason{ReasonAttemptCap}},
		{"wait equal to cap admits", spend, Spent{}, Next{Wait: 2 * time.Second}, "admit", nil},
		{"wait 1ns over cap", spend, Spent{}, Next{Wait: 2*time.Second + 1}, "refuse: queue wait", []Reason{ReasonQueueWait}},
		{"wait+elapsed equal to time left admits", spend, Spent{Time: 4 * time.Second}, Next{Wait: time.Second, Gen: 5 * time.Second}, "admit", nil},
		{"wait+elapsed 1ns over time left", spend, Spent{Time: 4 * time.Second}, Next{Wait: time.Second, Gen: 5*time.Second + 1}, "refuse: deadline", []Reason{ReasonDeadline}},
		{"deadline already spent", spend, Spent{Time: 11 * time.Second}, Next{}, "refuse: deadline", []Reason{ReasonDeadline}},
		{"tokens equal to ceiling admit", spend, Spent{Tokens: 60}, Next{Tokens: 40}, "admit", nil},
		{"tokens one over ceiling", spend, Spent{Tokens: 60}, Next{Tokens: 41}, "refuse: token ceiling", []Reason{ReasonTokenCeiling}},
		{"spend equal to ceiling admits", spend, Spent{USD: 0.07}, Next{USD: 0.03}, "admit", nil},
		{"spend over ceiling", spend, Spent{USD: 0.07}, Next{USD: 0.0301}, "refuse: spend ceiling", []Reason{ReasonSpendCeiling}},
		{"no spend ceiling ignores USD", seed003, Spent{USD: 1e6}, Next{USD: 1e6}, "admit", nil},
		{"every check fails, in gate order", spend,
			Spent{Time: 9 * time.Second, Tokens: 100, Attempts: 3, USD: 0.1},
			Next{Wait: 3 * time.Second, Gen: time.Second, Tokens: 1, USD: 0.01},
			"refuse: attempt cap",
			[]Reason{ReasonAttemptCap, ReasonQueueWait, ReasonDeadline, ReasonTokenCeiling, ReasonSpendCeiling}},
		{"queue wait before deadline", seed003, Spent{Time: 44 * time.Second}, Next{Wait: 6 * time.Second}, "refuse: queue wait",
			[]Reason{ReasonQueueWait, ReasonDeadline}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.b, tt.s, tt.n)
			assert.Equal(t, tt.want, d.String())
			assert.Equal(t, tt.failing, d.Failing)
			if len(tt.failing) > 0 {
				assert.Equal(t, tt.failing[0], d.Reason)
			}
		})
	}
}

func TestParseDecisionRoundTrip(t *testing.T) {
	for _, r := range Reasons {
		d, err := ParseDecision(Refuse(r).String())
		require.NoError(t, err)
		assert.Equal(t, r, d.Reason)
	}
	d, err := ParseDecision("admit")
	require.NoError(t, err)
	assert.True(t, d.Admit)
	for _, bad := range []string{"", "Admit", "refuse", "refuse:", "refuse: ", "refuse:deadline", "ok"} {
		_, err := ParseDecision(bad)
		assert.Error(t, err, bad)
	}
}

func TestBudgetValidateNamesKey(t *testing.T) {
	b := seed003
	b.MaxAttempts = 0
	assert.ErrorContains(t, b.Validate(), "budget.max_attempts")
	b = seed003
	b.MaxWait = -1
	assert.ErrorContains(t, b.Validate(), "budget.max_wait")
}

func BenchmarkDecide(b *testing.B) {
	s := Spent{Time: sec(7.2), Tokens: 2100, Attempts: 1}
	n := Next{Wait: sec(18), Gen: sec(9), Tokens: 2400}
	b.ReportAllocs()
	for b.Loop() {
		d := Decide(seed003, s, n)
		if d.Admit {
			b.Fatal("admitted")
		}
	}
}

// A job past its budget (a log that recorded attempts past the cap, a
// job that ran past its deadline) has nothing left: never less than zero.
func TestDecideRemainingNeverNegative(t *testing.T) {
	b := Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 2, MaxWait: 5 * time.Second, MaxSpendUSD: 0.10}
	d := Decide(b, Spent{Time: 50 * time.Second, Tokens: 9000, Attempts: 3, USD: 0.25}, Next{})
	assert.Equal(t, Remaining{}, d.Remaining)
	assert.Equal(t, []Reason{ReasonAttemptCap, ReasonDeadline, ReasonTokenCeiling, ReasonSpendCeiling}, d.Failing)
}

// A rule's refusal keeps the gate's own failing checks beside it, and
// what the budget has left.
func TestRefuseFirst(t *testing.T) {
	b := Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 2, MaxWait: 5 * time.Second}
	gate := Decide(b, Spent{Time: 10 * time.Second, Attempts: 2}, Next{})
	d := RefuseFirst(ReasonRetryLimit, gate)
	assert.Equal(t, "refuse: retry limit", d.String())
	assert.Equal(t, []Reason{ReasonRetryLimit, ReasonAttemptCap}, d.Failing)
	assert.Equal(t, gate.Remaining, d.Remaining)
	assert.Equal(t, []Reason{ReasonPermanentError}, RefuseFirst(ReasonPermanentError, Decide(b, Spent{}, Next{})).Failing)
}
