package seat

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// BenchmarkCutUnderLoad is the hard timeout under load: 64 attempts at
// once on a server that streams a few KiB of text without usage and then
// holds, all cut by the same hard timeout, each then counting its tokens
// (a rehearse at concurrency 64 on a stalling seat). It reports how late
// after the limit the rows' elapsed and the server's view of the cut
// are: p50, p99 and max, in milliseconds.
//
//	go test ./rehearse/seat -run '^$' -bench CutUnderLoad -benchtime 10x
func BenchmarkCutUnderLoad(b *testing.B) {
	const hard, conc = 300 * time.Millisecond, 64
	text := strings.Repeat("lorem ipsum dolor sit amet ", 40)
	var mu sync.Mutex
	var elapsed, seen []time.Duration
	starts := map[string]time.Time{}
	srv := loopback(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		sw := startStream(w, "text/event-stream")
		for range 20 {
			sw.data(oaText(text))
		}
		select {
		case <-r.Context().Done():
			mu.Lock()
			if t0, ok := starts[r.Header.Get("Idempotency-Key")]; ok {
				seen = append(seen, time.Since(t0)-hard)
			}
			mu.Unlock()
		case <-time.After(10 * time.Second):
		}
	}))
	s := newTestSeat(b, "openai", srv.URL)
	prompt := strings.Repeat("Say hello in five words. ", 200)
	n := 0
	for b.Loop() {
		var wg sync.WaitGroup
		for range conc {
			n++
			id := strconv.Itoa(n)
			wg.Add(1)
			go func() {
				defer wg.Done()
				mu.Lock()
				starts[id] = time.Now()
				mu.Unlock()
				o := DoWithin(context.Background(), s, Request{Prompt: prompt, IdempotencyKey: id}, hard)
				mu.Lock()
				elapsed = append(elapsed, o.Elapsed-hard)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	time.Sleep(100 * time.Millisecond) // the last handlers' views
	mu.Lock()
	defer mu.Unlock()
	for name, ds := range map[string][]time.Duration{"elapsed": elapsed, "server-saw": seen} {
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2])/1e6, name+"-p50-ms-late")
		b.ReportMetric(float64(ds[len(ds)*99/100])/1e6, name+"-p99-ms-late")
		b.ReportMetric(float64(ds[len(ds)-1])/1e6, name+"-max-ms-late")
	}
}
