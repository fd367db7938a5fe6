package admit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The wait is not counted twice: a repeat of a 1.2 s wait, 7.2 s elapsed
// attempt takes 7.2 s, and 7.8 s are left of a 15 s deadline.
func TestTrackDeadlineCountsTheWaitOnce(t *testing.T) {
	b := Budget{Deadline: 15 * time.Second, TokenCeiling: 8000, MaxAttempts: 3, MaxWait: 5 * time.Second}
	var tr Track
	tr.Sent(&Attempt{Seat: "s", Outcome: OK, Content: true, Wait: sec(1.2), Elapsed: sec(7.2), Tokens: 2100})
	n := tr.Estimate("s", 0)
	assert.Equal(t, sec(1.2), n.Wait)
	assert.Equal(t, sec(6.0), n.Gen)
	assert.Equal(t, sec(7.2), n.Elapsed())
	d := tr.Before(b, "s", tr.Spent().Time, 0)
	assert.Equal(t, "admit", d.String())
	assert.Equal(t, sec(7.8), d.Remaining.Time)

	b.Deadline = sec(14.3) // 7.1 s left: a repeat does not fit
	assert.Equal(t, "refuse: deadline", tr.Before(b, "s", tr.Spent().Time, 0).String())
}

func TestTrackEstimatePerSeat(t *testing.T) {
	var tr Track
	assert.Equal(t, Next{USD: 0.5}, tr.Estimate("a", 0.5), "nothing observed: only money is reserved")
	tr.Sent(&Attempt{Seat: "a", Outcome: Timeout, Wait: sec(25), Elapsed: sec(25), Tokens: 900, Prompt: 900})
	n := tr.Estimate("a", 0.5)
	assert.Equal(t, sec(25), n.Wait, "a cut-off before the first byte is a wait of at least its length")
	assert.Equal(t, time.Duration(0), n.Gen, "a cut-off did not return")
	assert.Equal(t, int64(900), n.Tokens)
	assert.Equal(t, Next{USD: 0.25}, tr.Estimate("b", 0.25), "the fallback seat has observed nothing yet")

	tr.Sent(&Attempt{Seat: "a", Outcome: ServerError, Wait: sec(15), Elapsed: sec(15), Tokens: 900, Prompt: 900})
	n = tr.Estimate("a", 0)
	assert.Equal(t, sec(15), n.Wait, "an error answer's wait is the last observed wait")
	assert.Equal(t, sec(15), n.Gen, "an answer without content spent its whole elapsed")
	assert.Equal(t, Spent{Time: sec(40), Tokens: 1800, Attempts: 2}, tr.Spent())
	assert.Equal(t, JobHistory{Retries: 1, Timeouts: 1}, tr.History())
}

func TestTrackSaturates(t *testing.T) {
	var tr Track
	for range 2 {
		tr.Sent(&Attempt{Seat: "s", Outcome: OK, Content: true, Tokens: 5_000_000_000_000_000_000, Elapsed: MaxDuration, USD: 1e300})
	}
	assert.Equal(t, MaxTokens, tr.Spent().Tokens)
	assert.Equal(t, MaxDuration, tr.Spent().Time)
	b := Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 5, MaxWait: 5 * time.Second}
	d := Decide(b, Spent{Tokens: 5_000_000_000_000_000_000, Attempts: 1}, Next{Tokens: 5_000_000_000_000_000_000})
	assert.Equal(t, "refuse: token ceiling", d.String(), "huge spends never wrap into an admit")
}

func TestDecideNoTimeLeft(t *testing.T) {
	b := Budget{Deadline: 10 * time.Second, TokenCeiling: 100, MaxAttempts: 3, MaxWait: time.Second}
	assert.Equal(t, "refuse: deadline", Decide(b, Spent{Time: 10 * time.Second}, Next{}).String())
	assert.Equal(t, "admit", Decide(b, Spent{Time: 9 * time.Second}, Next{Gen: time.Second}).String(), "equality admits")
}

func TestRetryLimitIsNotAttemptCap(t *testing.T) {
	p := RetryPolicy{BaseDelay: time.Second, MaxDelay: 8 * time.Second, TimeoutsRetried: 1}
	var tr Track
	for range 2 {
		tr.Sent(&Attempt{Seat: "s", Outcome: Timeout, Elapsed: time.Second})
	}
	step := AfterFailure(p, Failure{Outcome: Timeout, Billing: Ambiguous}, tr.History(), rand.New(rand.NewPCG(1, 2)))
	assert.False(t, step.Retry)
	assert.Equal(t, ReasonRetryLimit, step.Reason)
	assert.Equal(t, "refuse: retry limit", Refuse(step.Reason).String())
	assert.Equal(t, "unknown", tr.End())
}

func TestReservation(t *testing.T) {
	// $2.50 in, $10 out per million; 1000 prompt tokens + 150000 max_tokens.
	assert.InDelta(t, 1.5025, Reservation(Prices{In: 2.5, Out: 10, CachedIn: 2.5, CacheWrite: 2.5}, 1000, 150000), 1e-12)
	assert.Equal(t, MaxUSD, Reservation(Prices{1e12, 1e12, 1e12, 1e12}, MaxTokens, MaxTokens))
}

// A reset track is a new job's: nothing spent, nothing observed, no
// history, whatever the last job left.
func TestTrackReset(t *testing.T) {
	var tr Track
	tr.Sent(&Attempt{Seat: "s", Outcome: Timeout, Wait: sec(5), Elapsed: sec(25), Tokens: 100})
	tr.Reset()
	assert.Equal(t, Track{seats: tr.seats}, tr)
	assert.Empty(t, tr.seats)
	assert.False(t, tr.Observed("s"))
	assert.Equal(t, Next{USD: 0.5}, tr.Estimate("s", 0.5))
	assert.Equal(t, "failed", tr.End())
	assert.Equal(t, JobHistory{}, tr.History())
}
