package rehearse

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// TestSentRowITL: the row builder logs a seat's ITL at the log's
// resolution, and nothing when the seat had none.
func TestSentRowITL(t *testing.T) {
	b := &RowBase{TS: time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC), Job: "j", Attempt: 1, Seat: "s"}
	o := &seat.Observation{Seat: "s", Outcome: admit.OK, Wait: 200 * time.Millisecond, HasWait: true, Elapsed: time.Second,
		ITLMean: 25*time.Millisecond + 400*time.Microsecond, ITLMax: 40*time.Millisecond + 600*time.Microsecond, HasITL: true}
	var r ledgerfile.Row
	SentRow(&r, b, &admit.Track{}, o, 0, false, "")
	require.True(t, r.HasITL)
	require.Equal(t, 25*time.Millisecond, r.ITLMean)
	require.Equal(t, 41*time.Millisecond, r.ITLMax)
	require.Contains(t, string(ledgerfile.AppendRow(nil, &r)), "itl_mean_s=0.025 itl_max_s=0.041")

	o.ITLMean, o.ITLMax, o.HasITL = 0, 0, false
	r = ledgerfile.Row{}
	SentRow(&r, b, &admit.Track{}, o, 0, false, "")
	require.False(t, r.HasITL)
	require.NotContains(t, string(ledgerfile.AppendRow(nil, &r)), "itl_")
}
