package seat

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// BenchmarkStopwatch measures the seat's stopwatch against the server's
// own clock, on loopback: the server takes its request, sends headers at
// 2 ms, the first content at 5 ms and the last byte at 10 ms, and reports
// when each write left. A seat's wait and elapsed minus the server's spans
// is what the client adds: the request and response in flight on
// loopback, and the client's own work. The same figures for a bare
// net/http client that reads the body to EOF (what curl's time_total and a
// hand-written timer measure) are the floor.
//
// Reported metrics, in microseconds: p50 and p99 of the seat's error on
// elapsed and on wait, and the bare client's p50 on elapsed. Issue 11's
// goal: the seat's p50 within 300 µs of the bare client's, p99 within 5 ms.
//
//	go test ./rehearse/seat -run '^$' -bench Stopwatch -benchtime 200x
func BenchmarkStopwatch(b *testing.B) {
	type spans struct{ wait, elapsed time.Duration }
	truth := make(chan spans, 1)
	srv := loopback(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		start := time.Now()
		fl := w.(http.Flusher)
		w.Header().Set("Content-Type", "text/event-stream")
		time.Sleep(2 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
		fl.Flush()
		time.Sleep(3 * time.Millisecond)
		io.WriteString(w, "data: "+oaText("Hi")+"\n\n")
		fl.Flush()
		wait := time.Since(start)
		time.Sleep(5 * time.Millisecond)
		io.WriteString(w, "data: "+oaText(" there.")+"\n\ndata: "+oaUsage(12, 2)+"\n\ndata: [DONE]\n\n")
		fl.Flush()
		truth <- spans{wait, time.Since(start)}
	}))
	s, err := NewWithOptions(Config{Name: "b", Kind: "openai", BaseURL: srv.URL + "/v1", Model: "gpt-4o-mini"}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	req := Request{Prompt: "Say hi.", MaxTokens: 16}
	var seatWait, seatElapsed, bareElapsed []time.Duration
	bare := &http.Client{}
	body := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hi."}]}`
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		obs := s.Do(ctx, req)
		cancel()
		if obs.Outcome != admit.OK {
			b.Fatalf("attempt %d: %s %s", i, obs.Outcome, obs.Detail)
		}
		t := <-truth
		seatWait = append(seatWait, obs.Wait-t.wait)
		seatElapsed = append(seatElapsed, obs.Elapsed-t.elapsed)

		start := time.Now()
		resp, err := bare.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		el := time.Since(start)
		t = <-truth
		bareElapsed = append(bareElapsed, el-t.elapsed)
	}
	b.StopTimer()
	q := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return float64(d[int(p*float64(len(d)-1))].Microseconds())
	}
	b.ReportMetric(q(seatElapsed, 0.5), "elapsed-err-p50-µs")
	b.ReportMetric(q(seatElapsed, 0.99), "elapsed-err-p99-µs")
	b.ReportMetric(q(seatWait, 0.5), "wait-err-p50-µs")
	b.ReportMetric(q(seatWait, 0.99), "wait-err-p99-µs")
	b.ReportMetric(q(bareElapsed, 0.5), "bare-elapsed-err-p50-µs")
	b.ReportMetric(q(bareElapsed, 0.99), "bare-elapsed-err-p99-µs")
}
