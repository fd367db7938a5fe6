package rehearse

import (
	"testing"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// alternating is a seat that answers ok and fast 503 in turn.
type alternating struct{}

func (alternating) PlanFor(n int) seat.Plan {
	if n%2 == 1 {
		return seat.Plan{Status: 503, Elapsed: 80 * time.Millisecond}
	}
	return seat.Plan{TTFB: 150 * time.Millisecond, Wait: 600 * time.Millisecond, Elapsed: 2 * time.Second, PromptTokens: 1200, CompletionTokens: 300}
}

// BenchmarkVirtual1M drives a million jobs through the attempt loop on the
// virtual clock — the simulator's load: a two-attempt policy against a
// seat alternating ok and fast 503, so nearly every job is a 503, a
// jittered backoff and an ok (about two million attempts). The sink only
// counts rows, as a simulator's would. The breaker is off: at a 50%
// failure rate it would open and turn most jobs into instant refusals,
// which measures less of the loop.
func BenchmarkVirtual1M(b *testing.B) {
	const jobs = 1_000_000
	p := DefaultPolicy()
	p.Breaker.FailureRate = 0
	var n int
	l, err := New(Config{
		Policy: p, Seats: []SeatSpec{{Config: seat.Config{Name: "alt", Model: "m"}, Planner: alternating{}}},
		Rand: seeded(1), Run: 1, Jobs: jobs, Prompt: "bench",
		Sink: func(*ledgerfile.Row) { n++ },
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n = 0
		res, err := l.RunVirtual(VirtualOptions{Jobs: jobs, Concurrency: 64, Start: t0})
		if err != nil || res.Started != jobs {
			b.Fatal(err, res)
		}
	}
	b.ReportMetric(float64(n), "rows/op")
}
