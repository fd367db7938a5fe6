//go:build unix

package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// BenchmarkReportHTMLMillionRows: report --html beside plain report over
// the same 1M-row log (RETRYGATE_BENCH_ROWS changes the count). The page's
// size is reported as html_bytes; the bar is a few MB, in under
// twice plain report's time.
func BenchmarkReportHTMLMillionRows(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("RETRYGATE_BENCH_ROWS")); err == nil && v > 0 {
		n = v
	}
	dir := b.TempDir()
	path := filepath.Join(dir, "rehearsal.log")
	w := ledgerfile.NewWriter(path, false)
	outcomes := []admit.Outcome{admit.ServerError, admit.Timeout, admit.OK, admit.OK, admit.RateLimited, admit.OK}
	batch := make([]ledgerfile.Row, 0, 1000)
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for i := 0; i < n; i++ {
		o := outcomes[i%len(outcomes)]
		r := ledgerfile.Row{TS: t0.Add(time.Duration(i) * 100 * time.Millisecond), Job: fmt.Sprintf("job-%d", i/3),
			Attempt: i%3 + 1, Seat: []string{"scratch", "cheap"}[i%2], Model: "m",
			Wait: time.Duration(100+i%5000) * time.Millisecond, Elapsed: time.Duration(5100+i%9000) * time.Millisecond,
			Tokens: int64(500 + i%3000), Outcome: o, Decision: "admit", CostUSD: 0.0001, HasCost: true, Fallback: i%3 == 2}
		if i%3 == 2 {
			r.JobEnd = ledgerfile.JobSucceeded // every third row is ok: each job ends there
		}
		batch = append(batch, r)
		if len(batch) == cap(batch) || i == n-1 {
			if err := w.Append(batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	w.Close()
	page := filepath.Join(dir, "report.html")
	for _, c := range []struct {
		name string
		args []string
	}{{"report", []string{"report", path}}, {"html", []string{"report", "--html", page, path}}} {
		b.Run(c.name, func(b *testing.B) {
			cpu0 := cpuSeconds()
			for i := 0; i < b.N; i++ {
				st, _, _, _ := TestStreams()
				st.Out, st.ErrOut = io.Discard, io.Discard
				f := &Factory{IO: st, Now: time.Now, Getenv: os.Getenv, Ctx: context.Background()}
				if code := Run(f, c.args); code != 0 {
					b.Fatalf("%v: exit %d", c.args, code)
				}
			}
			// CPU time is steadier than wall time on a shared machine.
			b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			if st, err := os.Stat(page); err == nil && c.name == "html" {
				b.ReportMetric(float64(st.Size()), "html_bytes")
			}
		})
	}
}

// cpuSeconds is the process's user and system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
