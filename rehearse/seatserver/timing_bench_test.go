package seatserver

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// BenchmarkTimingError measures how far our seats' ttfb, wait and elapsed
// land from the plan's, against the seat server on loopback, for waits
// and elapsed times of 50–300 ms. It reports the error distribution
// instead of asserting it:
//
//	go test -run '^$' -bench TimingError -benchtime 60x ./rehearse/seatserver/
func BenchmarkTimingError(b *testing.B) {
	for _, f := range Formats {
		b.Run(string(f), func(b *testing.B) {
			var ps []seat.Plan
			for i := range 12 {
				wait := time.Duration(50+25*(i%6)) * ms
				ps = append(ps, seat.Plan{TTFB: wait / 2, Wait: wait, Elapsed: wait + time.Duration(50+20*(i%8))*ms,
					PromptTokens: 20, CompletionTokens: 40})
			}
			// One plan per request; request 0 warms up (tokenizer tables,
			// first connection) and is not counted.
			cycle := plans{ps[0]}
			for i := 0; i < b.N; i++ {
				cycle = append(cycle, ps[i%len(ps)])
			}
			r := serve(b, f, cycle...)
			s, err := seat.New(seat.Config{Name: "b", Kind: string(f), BaseURL: r.baseURL(f), Model: "m"}, testGetenv)
			if err != nil {
				b.Fatal(err)
			}
			s.Do(context.Background(), seat.Request{Prompt: "x", MaxTokens: 64})
			var ttfb, wait, elapsed []float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				obs := s.Do(context.Background(), seat.Request{Prompt: "x", MaxTokens: 64})
				if obs.Outcome != admit.OK {
					b.Fatalf("attempt %d: %s %s", i, obs.Outcome, obs.Detail)
				}
				p := cycle[i+1]
				ttfb = append(ttfb, float64(obs.TTFB-p.TTFB)/float64(ms))
				wait = append(wait, float64(obs.Wait-p.Wait)/float64(ms))
				elapsed = append(elapsed, float64(obs.Elapsed-p.Elapsed)/float64(ms))
			}
			b.StopTimer()
			report := func(name string, xs []float64) {
				if len(xs) == 0 {
					return
				}
				slices.Sort(xs)
				b.ReportMetric(xs[len(xs)/2], name+"-p50-ms")
				b.ReportMetric(xs[len(xs)*9/10], name+"-p90-ms")
				b.ReportMetric(xs[len(xs)-1], name+"-max-ms")
			}
			report("ttfb", ttfb)
			report("wait", wait)
			report("elapsed", elapsed)
		})
	}
}
