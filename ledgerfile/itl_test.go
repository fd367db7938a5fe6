package ledgerfile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestITLRoundTrip: itl_mean_s and itl_max_s are written with 3 decimals
// like every duration and read back; a row without ITL writes neither.
func TestITLRoundTrip(t *testing.T) {
	want := Row{Job: "j", Attempt: 1, Seat: "s", Wait: 200 * time.Millisecond, Elapsed: time.Second,
		ITLMean: 25 * time.Millisecond, ITLMax: 40 * time.Millisecond, HasITL: true}
	line := AppendRow(nil, &want)
	require.Contains(t, string(line), " itl_mean_s=0.025 itl_max_s=0.040 ")
	var got Row
	require.NoError(t, ParseLine(line[:len(line)-1], &got))
	require.True(t, got.HasITL)
	require.Equal(t, want.ITLMean, got.ITLMean)
	require.Equal(t, want.ITLMax, got.ITLMax)

	want.ITLMean, want.ITLMax, want.HasITL = 0, 0, false
	line = AppendRow(nil, &want)
	require.NotContains(t, string(line), "itl_")
	got = Row{}
	require.NoError(t, ParseLine(line[:len(line)-1], &got))
	require.False(t, got.HasITL)

	require.Error(t, ParseLine([]byte("job=j attempt=1 wait_s=0 elapsed_s=1 tokens=0 outcome=ok itl_mean_s=abc"), &got), "a bad value is refused")
}
