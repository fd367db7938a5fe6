package summary

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// benchLog is the log the read-path benchmarks read: $RETRYGATE_BENCH_LOG
// when set (bench/compare.sh's realistic log, from bench/genlog: `go run
// ./bench/genlog -rows 1000000 -log DIR/rehearsal.log`), otherwise
// benchRows' million rows.
func benchLog(b *testing.B) (path string, rows int64) {
	if p := os.Getenv("RETRYGATE_BENCH_LOG"); p != "" {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if _, _, err := Scan(f, p, false, func(*ledgerfile.Row) { rows++ }); err != nil {
			b.Fatal(err)
		}
		return p, rows
	}
	path = filepath.Join(b.TempDir(), "rehearsal.log")
	writeBenchLog(b, path, 1_000_000)
	return path, 1_000_000
}

// BenchmarkReadPath is report's and check's whole read path over one log
// (see benchLog), reported per row: the strict read alone ("read"), read
// and summarised as report does ("report"), and read, replayed and judged
// as check does ("check").
//
// The repository's default.pgo (the profile go build optimises the
// binary by) holds this benchmark's CPU profile over compare.sh's
// realistic log, beside simulate's and the proxy's: bench/pgo.sh takes
// all three again.
func BenchmarkReadPath(b *testing.B) {
	path, n := benchLog(b)
	scan := func(b *testing.B, fn func(*ledgerfile.Row)) {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if _, _, err := Scan(f, path, false, fn); err != nil {
			b.Fatal(err)
		}
	}
	perRow := func(b *testing.B, run func() any) {
		measure(b, run)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/row")
	}
	b.Run("read", func(b *testing.B) {
		perRow(b, func() any {
			var got int64
			scan(b, func(*ledgerfile.Row) { got++ })
			if got != n {
				b.Fatalf("rows %d, want %d", got, n)
			}
			return nil
		})
	})
	b.Run("report", func(b *testing.B) {
		perRow(b, func() any {
			sum := New(Options{By: BySeat, SlowAfter: 10 * time.Second})
			scan(b, func(r *ledgerfile.Row) { sum.Add(r, path) })
			s := sum.Close()
			if s.Rows != n {
				b.Fatalf("rows %d, want %d", s.Rows, n)
			}
			return Recommend(s, 0)
		})
	})
	b.Run("check", func(b *testing.B) {
		ts := []Threshold{}
		for _, e := range []struct{ metric, expr string }{{"wait_s", "p(95) < 5s"}, {"attempts_per_success", "< 1.5"}, {"unknown_rate", "count == 0"}} {
			t, err := admit.ParseThreshold(e.metric, e.expr)
			if err != nil {
				b.Fatal(err)
			}
			ts = append(ts, Threshold{Threshold: t, Where: "bench"})
		}
		budget := admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 2, MaxWait: 5 * time.Second}
		perRow(b, func() any {
			c, err := NewCheck(CheckOptions{Budget: budget, Retry: admit.RetryPolicy{BaseDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second, SlowServerAfter: 10 * time.Second, HonorRetryAfter: true, TimeoutsRetried: 1}, SlowAfter: 10 * time.Second, Thresholds: ts})
			if err != nil {
				b.Fatal(err)
			}
			scan(b, func(r *ledgerfile.Row) { c.Add(r, path) })
			res := c.Close()
			if res.Summary.Rows+res.HeldOut.Rows != n {
				b.Fatalf("rows %d, want %d", res.Summary.Rows, n)
			}
			return res
		})
	})
}
