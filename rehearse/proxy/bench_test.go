package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// benchStream is a short chat completion stream with usage, as a
// provider answers at once: the benchmark measures the proxy, not a model.
var benchStream = strings.Repeat(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" word"}}]}`+"\n\n", 20) +
	`data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":20}}` + "\n\ndata: [DONE]\n\n"

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchUpstream(b *testing.B, think time.Duration) string {
	b.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if think > 0 {
			time.Sleep(think) // a model's time to answer, as a real server takes it
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, benchStream)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go pprof.Do(context.Background(), pprof.Labels("side", "upstream"), func(context.Context) { _ = srv.Serve(ln) })
	b.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// BenchmarkAddedLatency sends the same streaming request to a fast
// upstream directly and through the proxy (which writes every row to a
// real log), at concurrency 1 and 64, and reports the added latency at
// p50 and p99 (elapsed through the proxy minus direct, submit → last
// byte) and the throughput through the proxy as a fraction of direct.
// Goal: added-p50 ≤ 1 ms, throughput ≥ 0.8× direct. An instant upstream
// measures the proxy's own cost; one that thinks 20ms, as the fastest
// model does, measures what an application sees.
//
//	go test ./rehearse/proxy/ -run '^$' -bench AddedLatency -benchtime 3000x
func BenchmarkAddedLatency(b *testing.B) {
	// As the command runs it (one process holds the client, the proxy
	// and the upstream here, so all three collect at this setting).
	defer debug.SetGCPercent(debug.SetGCPercent(rehearse.RealGCPercent))
	for _, tc := range []struct {
		name    string
		conc    int
		think   time.Duration
		chat40k bool // a 40 KB conversation, as a long chat sends it (the body reader's case)
	}{
		{"upstream=0/c=1", 1, 0, false}, {"upstream=0/c=64", 64, 0, false}, {"upstream=0/c=64,chat=40KB", 64, 0, true},
		{"upstream=20ms/c=1", 1, 20 * time.Millisecond, false}, {"upstream=20ms/c=64", 64, 20 * time.Millisecond, false},
	} {
		conc := tc.conc
		b.Run(tc.name, func(b *testing.B) {
			up := benchUpstream(b, tc.think)
			w := ledgerfile.NewWriter(filepath.Join(b.TempDir(), "rehearsal.log"), false)
			b.Cleanup(func() { _ = w.Close() })
			pol := testPolicy()
			px, err := New(Options{Policy: pol, Run: 1, MaxConcurrent: 1024, MaxClientConcurrent: 1024,
				Chain: []seat.Config{{Name: "s", Kind: "openai", BaseURL: up + "/v1", Model: "m"}},
				Sink:  func(r []ledgerfile.Row) error { return w.Append(r...) }})
			if err != nil {
				b.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			// Labelled, as the upstream is, so that a CPU profile can be cut
			// to the proxy's goroutines alone: -tagfocus side=proxy.
			go pprof.Do(ctx, pprof.Labels("side", "proxy"), func(ctx context.Context) { _ = px.Serve(ctx, ln, io.Discard); close(done) })
			b.Cleanup(func() { cancel(); <-done })
			via := "http://" + ln.Addr().String()

			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxIdleConns: 256, DisableCompression: true}}
			body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			if tc.chat40k {
				msg := `{"role":"user","content":"` + strings.Repeat(`lorem ipsum dolor sit amet, \"quoted\" `, 50) + `"}`
				body = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[` + strings.Repeat(msg+",", 19) + msg + `]}`
			}
			run := func(origin string, n int) (lat []time.Duration, took, cpu time.Duration) {
				lat = make([]time.Duration, n)
				cpu0 := cpuTime()
				defer func() { cpu = cpuTime() - cpu0 }()
				var next sync.WaitGroup
				jobs := make(chan int)
				began := time.Now()
				for range conc {
					next.Add(1)
					go func() {
						defer next.Done()
						for i := range jobs {
							t0 := time.Now()
							resp, err := client.Post(origin+"/v1/chat/completions", "application/json", strings.NewReader(body))
							if err != nil {
								b.Error(err)
								continue
							}
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							lat[i] = time.Since(t0)
						}
					}()
				}
				for i := range n {
					jobs <- i
				}
				close(jobs)
				next.Wait()
				return lat, time.Since(began), 0
			}
			n := max(b.N, conc*4)
			run(up, min(n, 200)) // warm both paths' connections
			run(via, min(n, 200))
			b.ResetTimer()
			direct, dTook, dCPU := run(up, n)
			proxied, pTook, pCPU := run(via, n)
			b.StopTimer()
			pct := func(l []time.Duration, p float64) time.Duration {
				s := slices.Clone(l)
				slices.Sort(s)
				return s[min(len(s)-1, int(p*float64(len(s))))]
			}
			us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
			b.ReportMetric(us(pct(proxied, 0.50)-pct(direct, 0.50)), "added-p50-µs")
			b.ReportMetric(us(pct(proxied, 0.99)-pct(direct, 0.99)), "added-p99-µs")
			b.ReportMetric(us(pct(direct, 0.50)), "direct-p50-µs")
			b.ReportMetric(float64(n)/dTook.Seconds(), "direct-req/s")
			b.ReportMetric(float64(n)/pTook.Seconds(), "proxy-req/s")
			b.ReportMetric(dTook.Seconds()/pTook.Seconds(), "proxy/direct")
			// CPU time per request of this process (client, proxy and
			// upstream alike), proxied minus direct: what the proxy costs,
			// steadier than wall-clock figures on a shared machine.
			b.ReportMetric(us(pCPU-dCPU)/float64(n), "added-cpu-µs/req")
		})
	}
}
