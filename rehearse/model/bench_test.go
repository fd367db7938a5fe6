package model

import (
	"testing"

	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// benchModel is the model (bench/compare.sh's simulate rows).
const benchModel = "lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100"

// benchSimulate runs what `retrygate simulate --jobs N --model benchModel`
// runs with the built-in defaults: one seat playing the model.
func benchSimulate(b *testing.B, jobs int, rate float64) {
	m := mustParse(b, benchModel)
	p := rehearse.DefaultPolicy()
	p.Fallback = []string{"model"}
	b.ReportAllocs()
	for b.Loop() {
		specs, err := Planners([]seat.Config{{Name: "model"}}, m, 1)
		if err != nil {
			b.Fatal(err)
		}
		s, err := Run(Sim{Policy: p, Seats: specs, Jobs: jobs, Rate: rate, Seed: 1})
		if err != nil || s.Jobs != jobs {
			b.Fatal(err, s.Jobs)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(jobs), "ns/job")
}

// BenchmarkSimulate1M is `simulate --jobs 1000000`, jobs one after another.
func BenchmarkSimulate1M(b *testing.B) { benchSimulate(b, 1_000_000, 0) }

// BenchmarkSimulate1MRate is the same with Poisson arrivals at 20 jobs/s.
func BenchmarkSimulate1MRate(b *testing.B) { benchSimulate(b, 1_000_000, 20) }

// BenchmarkSimulate100k is a shorter run, for per-job costs.
func BenchmarkSimulate100k(b *testing.B) { benchSimulate(b, 100_000, 20) }
