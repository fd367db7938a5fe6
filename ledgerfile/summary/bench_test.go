package summary

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// benchRows makes n rows shaped like a rehearsal: three seats, jobs of
// one to three attempts, a mix of outcomes, costs and timestamps.
func benchRows(n int, fn func(*ledgerfile.Row)) {
	rng := rand.New(rand.NewPCG(1, 2))
	seats := []string{"scratch", "cheap", "local"}
	ts := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	job := 0
	for i := 0; i < n; {
		job++
		attempts := 1 + rng.IntN(3)
		var spent admit.Spent
		for a := 1; a <= attempts && i < n; a++ {
			last := a == attempts
			out := admit.OK
			if !last {
				out = []admit.Outcome{admit.Timeout, admit.RateLimited, admit.ServerError, admit.Reset}[rng.IntN(4)]
			}
			wait := time.Duration(rng.ExpFloat64() * float64(1500*time.Millisecond)).Round(time.Millisecond)
			el := wait + time.Duration(rng.ExpFloat64()*float64(4*time.Second)).Round(time.Millisecond)
			prompt, comp := int64(500+rng.IntN(1500)), int64(rng.IntN(800))
			r := ledgerfile.Row{
				TS: ts, Job: fmt.Sprintf("job-%07d", job), Attempt: a, Seat: seats[min(a-1, 2)], Model: "gpt-4o-mini",
				Wait: wait, TTFB: wait / 2, HasTTFB: true, Elapsed: el,
				Tokens: prompt + comp, PromptTokens: prompt, CompletionTokens: comp, HasSplit: true, TokensFrom: "usage",
				Outcome: out, HTTPStatus: 200, Billing: admit.BillingOf(out, el, 10*time.Second),
				CostUSD: float64(prompt+comp) * 2e-6, HasCost: true,
				SpentS: spent.Time, SpentTokens: spent.Tokens, Used: spent.Attempts, HasSpent: true,
				Decision: "admit", Fallback: a > 1, Holdout: job%10 == 0,
			}
			if last {
				r.JobEnd = ledgerfile.JobSucceeded
			}
			fn(&r)
			spent.Time += el
			spent.Tokens += r.Tokens
			spent.Attempts++
			ts = ts.Add(time.Second)
			i++
		}
	}
}

// writeBenchLog writes benchRows(n) as a log.
func writeBenchLog(tb testing.TB, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	_, _ = w.WriteString(ledgerfile.Header + "\n")
	var buf []byte
	benchRows(n, func(r *ledgerfile.Row) {
		buf = ledgerfile.AppendRow(buf[:0], r)
		_, _ = w.Write(buf)
	})
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkSummarize1M is the summary's own share of report: a million
// rows already parsed (200,000 rows fed five times), added and summed up.
func BenchmarkSummarize1M(b *testing.B) {
	var rows []ledgerfile.Row
	benchRows(200_000, func(r *ledgerfile.Row) { rows = append(rows, *r) })
	measure(b, func() any {
		sum := New(Options{By: BySeat, SlowAfter: 10 * time.Second, Deadline: 45 * time.Second})
		for range 5 {
			for i := range rows {
				sum.Add(&rows[i], "bench.log")
			}
		}
		s := sum.Close()
		if s.Rows != 1_000_000 {
			b.Fatalf("rows %d", s.Rows)
		}
		return s
	})
}

// BenchmarkReport1M generates a 1,000,000-row log once, then measures
// reading it alone ("read", the strict reader's share) and reading plus
// summarising it as `report` does ("report": streaming aggregation,
// exact percentiles, recommendations). MB-alloc is everything allocated
// per run; MB-live what is still live once the summary is done (the
// sorted values exact percentiles need, and per-job distributions);
// cpu-s the process CPU time per run, GC included (steadier than wall
// time on a shared machine).
func BenchmarkReport1M(b *testing.B) {
	path := filepath.Join(b.TempDir(), "rehearsal.log")
	writeBenchLog(b, path, 1_000_000)
	b.Run("read", func(b *testing.B) {
		measure(b, func() any {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			n := 0
			if _, _, err := Scan(f, path, false, func(*ledgerfile.Row) { n++ }); err != nil || n != 1_000_000 {
				b.Fatalf("rows %d: %v", n, err)
			}
			return nil
		})
	})
	b.Run("report", func(b *testing.B) {
		measure(b, func() any {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			sum := New(Options{By: BySeat, SlowAfter: 10 * time.Second})
			if _, _, err := Scan(f, path, false, func(r *ledgerfile.Row) { sum.Add(r, path) }); err != nil {
				b.Fatal(err)
			}
			s := sum.Close()
			if recs := Recommend(s, 1000); s.Rows != 1_000_000 || len(recs) != 3 {
				b.Fatalf("rows %d, recs %d", s.Rows, len(recs))
			}
			return s
		})
	})
}

func measure(b *testing.B, run func() any) {
	var before, after runtime.MemStats
	var totalAlloc, live uint64
	var cpu time.Duration
	cpuOK := true
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&before)
		c0, ok0 := cpuTime()
		b.StartTimer()
		kept := run()
		b.StopTimer()
		c1, ok1 := cpuTime()
		cpu += c1 - c0
		cpuOK = cpuOK && ok0 && ok1
		runtime.ReadMemStats(&after)
		totalAlloc += after.TotalAlloc - before.TotalAlloc
		runtime.GC()
		runtime.ReadMemStats(&after)
		live += after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
		runtime.KeepAlive(kept)
		b.StartTimer()
	}
	b.ReportMetric(float64(totalAlloc)/float64(b.N)/1e6, "MB-alloc/op")
	b.ReportMetric(float64(live)/float64(b.N)/1e6, "MB-live/op")
	if cpuOK {
		b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	}
}

// TestWriteBenchLog writes the million-row log the benchmarks read to
// $RETRYGATE_BENCH_LOG, for timing the whole `retrygate report` and
// `check` processes against it (bench/compare.sh); skipped otherwise.
func TestWriteBenchLog(t *testing.T) {
	path := os.Getenv("RETRYGATE_BENCH_LOG")
	if path == "" {
		t.Skip("set RETRYGATE_BENCH_LOG=FILE to write the 1,000,000-row log")
	}
	writeBenchLog(t, path, 1_000_000)
}

// BenchmarkExactValues1M weighs the ways to keep a million durations for
// exact percentiles: copy and sort them (slices.Sort), or count them at
// the reader's microsecond resolution, as values does.
func BenchmarkExactValues1M(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	ds := make([]time.Duration, 1_000_000)
	for i := range ds {
		ds[i] = time.Duration(rng.ExpFloat64() * float64(4*time.Second)).Round(time.Millisecond)
	}
	b.Run("sort", func(b *testing.B) {
		for range b.N {
			v := make([]float64, 0, len(ds))
			for _, d := range ds {
				v = append(v, d.Seconds())
			}
			slices.Sort(v)
			if admit.Percentile(v, 50) <= 0 {
				b.Fatal("no median")
			}
		}
	})
	b.Run("count", func(b *testing.B) {
		for range b.N {
			var v values
			for _, d := range ds {
				v.addDur(d)
			}
			if v.sorted(secExp).Percentile(50) <= 0 {
				b.Fatal("no median")
			}
		}
	})
}
