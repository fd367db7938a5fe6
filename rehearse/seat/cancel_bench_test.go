package seat

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkCancellation times how long after its hard timeout an attempt
// on a server that sent headers and then nothing returns, and how long
// until the server sees the request end (the goal: within 100 ms of the
// limit). It reports the worst and the median of each, per wire.
//
//	go test ./rehearse/seat -run '^$' -bench Cancellation -benchtime 20x
func BenchmarkCancellation(b *testing.B) {
	const hard = 100 * time.Millisecond
	for _, kind := range []string{"openai", "anthropic", "ollama"} {
		b.Run(kind, func(b *testing.B) {
			watch := newCancelWatch()
			srv := loopback(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ct, _ := firstFrame(kind)
				startStream(w, ct)
				watch.hold(r)
			}))
			s := newTestSeat(b, kind, srv.URL)
			var returned, seen []time.Duration
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), hard)
				start := time.Now()
				s.Do(ctx, Request{Prompt: "Say hello in five words."})
				returned = append(returned, time.Since(start)-hard)
				seen = append(seen, watch.wait(b).Sub(start)-hard)
				cancel()
			}
			for name, ds := range map[string][]time.Duration{"returned": returned, "server-saw": seen} {
				slices.Sort(ds)
				b.ReportMetric(float64(ds[len(ds)/2])/1e6, name+"-p50-ms-late")
				b.ReportMetric(float64(ds[len(ds)-1])/1e6, name+"-max-ms-late")
			}
		})
	}
}
