package rehearse

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// TestRetryBudgetRealClock: on the real clock, against a local seat that
// fails every call (in 80ms), four jobs at once with a budget of one retry per
// two first attempts (and no floor) send four first attempts and two
// retries; the other two retries are refused before they reach the seat,
// and their rows replay unchanged under the policy.
func TestRetryBudgetRealClock(t *testing.T) {
	srv := serveSeat(t, seat.Plan{Status: 503, Elapsed: 80 * time.Millisecond})
	pol := livePolicy()
	pol.Budget.MaxAttempts = 2
	pol.Retry.Budget = admit.RetryBudgetConfig{Ratio: 0.5, Window: time.Minute}
	var out syncRows
	l, err := New(Config{Policy: pol, Seats: []SeatSpec{srv.seat(t, "s")}, Rand: seeded(3), Sink: out.sink,
		Run: 1, Jobs: 4, Prompt: "scratch", MaxTokens: 8})
	require.NoError(t, err)
	// All four first attempts go out before any retry: each takes 80ms.
	_, err = l.RunReal(context.Background(), RealOptions{Jobs: 4, Concurrency: 4})
	require.NoError(t, err)

	rows := out.r
	var firsts, retries, refused int
	for _, r := range rows {
		switch {
		case r.Attempt == 1:
			firsts++
		case r.Decision == "refuse: retry budget":
			refused++
			assert.True(t, r.Unsent)
			assert.True(t, r.HasWindow)
		case r.Attempt == 2:
			retries++
		}
	}
	assert.Equal(t, 4, firsts)
	assert.Equal(t, 2, retries, "0.5 × 4 first attempts")
	assert.Equal(t, 2, refused)
	assert.Len(t, srv.srv.Requests(), 6, "the refused retries never reached the seat")

	rp := summary.NewReplayer(pol.Budget, pol.Retry)
	for i := range rows {
		var back ledgerfile.Row
		require.NoError(t, ledgerfile.ParseLine([]byte(ledgerfile.FormatRow(&rows[i])), &back))
		res := rp.Add(&back, "run.log")
		assert.Equal(t, res.Logged, res.Now, "row %d", i+1)
	}
}
