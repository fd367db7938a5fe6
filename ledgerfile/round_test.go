package ledgerfile

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"pgregory.net/rapid"

	"github.com/retrygate/retrygate/admit"
)

// Resolution and Kept round half away from zero and clamp, as
// admit.ClampDuration(d.Round(unit)) does, at every duration.
func TestRoundInIsRoundThenClamp(t *testing.T) {
	ref := func(d, unit time.Duration) time.Duration { return admit.ClampDuration(d.Round(unit)) }
	edges := []time.Duration{math.MinInt64, -time.Millisecond, -500 * time.Microsecond, -1, 0, 1, 499_999, 500_000, 500_001,
		1_499_999, 1_500_000, admit.MaxDuration - 1, admit.MaxDuration, admit.MaxDuration + 1, math.MaxInt64}
	for _, d := range edges {
		assert.Equal(t, ref(d, WriteResolution), Resolution(d), "Resolution(%d)", d)
		assert.Equal(t, ref(d, ReadResolution), Kept(d), "Kept(%d)", d)
	}
	rapid.Check(t, func(t *rapid.T) {
		d := time.Duration(rapid.Int64().Draw(t, "d"))
		if rapid.Bool().Draw(t, "small") {
			d = time.Duration(rapid.Int64Range(-int64(time.Hour), int64(time.Hour)).Draw(t, "small d"))
		}
		assert.Equal(t, ref(d, WriteResolution), Resolution(d))
		assert.Equal(t, ref(d, ReadResolution), Kept(d))
	})
}
