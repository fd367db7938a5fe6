package admit

import (
	"math"
	"time"
)

// The largest values retrygate keeps. Counts, durations and amounts that
// come from outside (a seat's usage field, a Retry-After header, a log, a
// flag) are clamped to these at the boundary, and every sum saturates at
// them, so nothing wraps and every figure the writer writes, the reader
// reads back. The log reader accepts exactly up to these limits.
const (
	// MaxTokens is 2^53−1: every count is exact as a JSON number too.
	MaxTokens int64 = 1<<53 - 1
	// MaxDuration is 10^9 seconds (about 31.7 years).
	MaxDuration = 1_000_000_000 * time.Second
	// MaxUSD is a trillion dollars.
	MaxUSD = 1e12
	// MaxAttempts is the most attempts one job counts.
	MaxAttempts = 1 << 20
)

// The largest attempt a script or a latency model plays: a day, a billion
// tokens, a billion tokens a second. They are far below the limits above,
// so a simulation's sums of millions of such attempts stay exact; no real
// model call comes near them.
const (
	MaxStep       = 24 * time.Hour
	MaxStepTokens = 1_000_000_000
	MaxTokenRate  = 1e9
)

// ClampTokens brings an outside count into [0, MaxTokens].
func ClampTokens(n int64) int64 { return min(max(n, 0), MaxTokens) }

// ClampTokensFloat brings a count read as a float (JSON numbers such as
// 9e18) into [0, MaxTokens]; NaN is 0.
func ClampTokensFloat(f float64) int64 {
	switch {
	case !(f > 0): // NaN, zero and negatives
		return 0
	case f >= float64(MaxTokens):
		return MaxTokens
	}
	return int64(f)
}

// ClampDuration brings an outside duration into [0, MaxDuration].
func ClampDuration(d time.Duration) time.Duration { return min(max(d, 0), MaxDuration) }

// SecondsDuration converts seconds from outside (a header, a flag) into a
// duration in [0, MaxDuration]; NaN is 0.
func SecondsDuration(s float64) time.Duration {
	switch {
	case !(s > 0):
		return 0
	case s >= MaxDuration.Seconds():
		return MaxDuration
	}
	return time.Duration(math.Round(s * 1e9))
}

// ClampUSD brings an outside amount into [0, MaxUSD]; NaN is 0.
func ClampUSD(f float64) float64 {
	switch {
	case !(f > 0):
		return 0
	case f >= MaxUSD:
		return MaxUSD
	}
	return f
}

// AddTokens is a+b saturating at MaxTokens (both clamped first).
func AddTokens(a, b int64) int64 { return min(ClampTokens(a)+ClampTokens(b), MaxTokens) }

// AddDuration is a+b saturating at MaxDuration (both clamped first).
func AddDuration(a, b time.Duration) time.Duration {
	return min(ClampDuration(a)+ClampDuration(b), MaxDuration)
}

// AddUSD is a+b saturating at MaxUSD (both clamped first).
func AddUSD(a, b float64) float64 { return min(ClampUSD(a)+ClampUSD(b), MaxUSD) }
