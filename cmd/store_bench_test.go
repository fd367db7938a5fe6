package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore/pgtest"
)

// BenchmarkReportMillionRows: `retrygate report` over the same rows in a
// file and in PostgreSQL (streamed through a server-side cursor).
// RETRYGATE_BENCH_ROWS changes the count (default 1,000,000).
func BenchmarkReportMillionRows(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("RETRYGATE_BENCH_ROWS")); err == nil && v > 0 {
		n = v
	}
	u := pgtest.DB(b)
	path := filepath.Join(b.TempDir(), "rehearsal.log")
	w := ledgerfile.NewWriter(path, false)
	outcomes := []admit.Outcome{admit.OK, admit.OK, admit.OK, admit.ServerError, admit.RateLimited, admit.Timeout}
	batch := make([]ledgerfile.Row, 0, 1000)
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for i := 0; i < n; i++ {
		o := outcomes[i%len(outcomes)]
		batch = append(batch, ledgerfile.Row{TS: t0.Add(time.Duration(i) * time.Millisecond), Job: fmt.Sprintf("job-%d", i/3),
			Attempt: i%3 + 1, Seat: []string{"scratch", "cheap"}[i%2], Model: "m",
			Wait: time.Duration(100+i%5000) * time.Millisecond, Elapsed: time.Duration(900+i%9000) * time.Millisecond,
			Tokens: int64(500 + i%3000), Outcome: o, Decision: "admit", CostUSD: 0.0001, HasCost: true})
		if len(batch) == cap(batch) || i == n-1 {
			if err := w.Append(batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	w.Close()
	ctx := context.Background()
	if _, err := pgstore.Init(ctx, u); err != nil {
		b.Fatal(err)
	}
	s, err := pgstore.Open(ctx, u, pgstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	fh, _ := os.Open(path)
	if _, err := s.Import(ctx, store.Entries(fh, path)); err != nil {
		b.Fatal(err)
	}
	fh.Close()
	s.Close()

	for _, c := range []struct{ name, log string }{{"file", path}, {"postgres", u}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				st, _, _, _ := TestStreams()
				st.Out, st.ErrOut = io.Discard, io.Discard
				f := &Factory{IO: st, Now: time.Now, Getenv: os.Getenv, Ctx: ctx}
				if code := Run(f, []string{"report", c.log}); code != 0 {
					b.Fatalf("report exit %d", code)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
