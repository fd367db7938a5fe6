package admit

import (
	"math"
)

// Percentile is the one definition of a percentile used everywhere in
// retrygate: nearest rank on the sorted values. The p-th percentile
// (0 < p <= 100) is the smallest observed value such that at least p% of
// the values are at or below it: sorted[ceil(p/100·n) − 1]. It is always
// a value that was observed, never an interpolation. p <= 0 is the
// minimum. sorted must be ascending; an empty slice gives NaN.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	return sorted[NearestRank(int64(n), p)-1]
}

// NearestRank is the 1-based rank of the p-th percentile among n sorted
// values (n > 0): ceil(p/100·n), at least 1 and at most n.
func NearestRank(n int64, p float64) int64 {
	if p <= 0 {
		return 1
	}
	// The epsilon keeps float error (99.9·1000/100 = 999.0000000000001)
	// from pushing the rank one past the exact one.
	rank := int64(math.Ceil(p*float64(n)/100 - 1e-9))
	return max(1, min(rank, n))
}
