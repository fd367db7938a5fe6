package admit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBreakerOpensHalfOpensCloses(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(sec(s)) }
	var changes []string
	b := NewBreaker(BreakerConfig{Window: 30 * time.Second, FailureRate: 0.5, MinRequests: 4, Cooldown: 10 * time.Second, HalfOpenProbes: 1},
		func(_ time.Time, from, to BreakerState) { changes = append(changes, from.String()+"→"+to.String()) })

	// Three failures: under min_requests, still closed.
	for i := 0; i < 3; i++ {
		assert.True(t, b.Allow(at(float64(i))))
		b.Record(at(float64(i)), true)
	}
	assert.Equal(t, Closed, b.State(at(3)))
	// Fourth request: 4/4 failed ≥ 50% → open.
	assert.True(t, b.Allow(at(3)))
	b.Record(at(3), true)
	assert.Equal(t, Open, b.State(at(3)))
	assert.False(t, b.Allow(at(12.9)), "open until the cooldown ends")
	// Cooldown over: half-open lets one probe through.
	assert.True(t, b.Allow(at(13)))
	assert.False(t, b.Allow(at(13)), "only half_open_probes probes")
	b.Record(at(14), true) // the probe failed: open again
	assert.Equal(t, Open, b.State(at(14)))
	assert.True(t, b.Allow(at(24)))
	b.Record(at(25), false) // probe succeeded: closed
	assert.Equal(t, Closed, b.State(at(25)))
	assert.Equal(t, []string{"closed→open", "open→half-open", "half-open→open", "open→half-open", "half-open→closed"}, changes)
	assert.Equal(t, sec(10+10), b.OpenTime(at(30)))
}

// TestBreakerWindowForgets: one failure, then successes. Counted, the
// failure makes the rate 1 of 2 (50%: open); past the window it is
// forgotten and the breaker stays closed. An event exactly one window old
// has left it.
func TestBreakerWindowForgets(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	cfg := BreakerConfig{Window: 30 * time.Second, FailureRate: 0.5, MinRequests: 2, Cooldown: time.Second}
	for _, tt := range []struct {
		name  string
		after time.Duration // from the failure to the success
		want  BreakerState
	}{
		{"inside the window the failure counts", 29 * time.Second, Open},
		{"exactly one window old it has left", 30 * time.Second, Closed},
		{"40 s old it is forgotten", 40 * time.Second, Closed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBreaker(cfg, nil)
			b.Record(t0, true)
			assert.Equal(t, Closed, b.State(t0), "one request: under min_requests")
			b.Record(t0.Add(tt.after), false)
			assert.Equal(t, tt.want, b.State(t0.Add(tt.after)))
		})
	}
	// A run of successes after an old failure never opens it.
	b := NewBreaker(cfg, nil)
	b.Record(t0, true)
	for i := range 5 {
		at := t0.Add(40*time.Second + time.Duration(i)*time.Second)
		b.Record(at, false)
		assert.Equal(t, Closed, b.State(at), "success %d", i+1)
	}
}

func TestBreakerDisabled(t *testing.T) {
	b := NewBreaker(BreakerConfig{}, nil)
	for i := 0; i < 100; i++ {
		b.Record(time.Time{}, true)
	}
	assert.True(t, b.Allow(time.Time{}))
}

func TestPercentileNearestRank(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	assert.Equal(t, 5.0, Percentile(v, 50))
	assert.Equal(t, 8.0, Percentile(v, 75))
	assert.Equal(t, 10.0, Percentile(v, 95))
	assert.Equal(t, 10.0, Percentile(v, 100))
	assert.Equal(t, 1.0, Percentile(v, 0))
	thousand := make([]float64, 1000)
	for i := range thousand {
		thousand[i] = float64(i + 1)
	}
	assert.Equal(t, 999.0, Percentile(thousand, 99.9), "float error must not push the rank up")
	assert.Equal(t, 990.0, Percentile(thousand, 99))
	assert.True(t, Percentile(nil, 50) != Percentile(nil, 50), "empty is NaN")
}
