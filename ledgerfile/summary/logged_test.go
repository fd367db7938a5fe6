package summary

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// logged is Duration.Round to the millisecond, for every duration.
func TestLoggedIsRoundToMillisecond(t *testing.T) {
	ds := []time.Duration{0, 1, 499_999, 500_000, 500_001, 999_999, 1_000_000, 1_500_000, 2_500_000,
		-1, -500_000, -1_500_000, math.MaxInt64, math.MinInt64, 1<<62 + 500_000, 1 << 62, 7_200_000_001}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		ds = append(ds, time.Duration(r.Int64N(1<<50)), -time.Duration(r.Int64N(1<<50)), time.Duration(r.Uint64()))
	}
	for _, d := range ds {
		if got, want := logged(d), d.Round(time.Millisecond); got != want {
			t.Fatalf("logged(%d) = %d, Round gives %d", d, got, want)
		}
	}
}
