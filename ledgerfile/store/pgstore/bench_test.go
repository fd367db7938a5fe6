package pgstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
)

// 16 concurrent claimers (8 per core on this 2-core machine).
const benchClaimers = 16

func benchBudget() admit.Budget {
	return admit.Budget{Deadline: 24 * time.Hour, TokenCeiling: admit.MaxTokens, MaxAttempts: admit.MaxAttempts,
		MaxWait: time.Minute, MaxSpendUSD: admit.MaxUSD}
}

func benchClaims(b *testing.B, jobs int) {
	s, _ := open(b, Options{MaxConns: benchClaimers})
	c := claims(s)
	ctx := context.Background()
	var granted atomic.Int64
	b.SetParallelism(max(1, benchClaimers/max(1, testingProcs())))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g, err := c.Claim(ctx, store.Request{Job: fmt.Sprintf("job-%d", rand.IntN(jobs)), Budget: benchBudget(),
				Hard: time.Hour, Next: admit.Next{Tokens: 100, USD: 0.001}})
			if err != nil {
				b.Fatal(err)
			}
			if g.Decision.Admit {
				granted.Add(1)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	if granted.Load() != int64(b.N) {
		b.Fatalf("%d of %d claims granted", granted.Load(), b.N)
	}
}

func BenchmarkClaimOneJob(b *testing.B)       { benchClaims(b, 1) }
func BenchmarkClaimThousandJobs(b *testing.B) { benchClaims(b, 1000) }

// BenchmarkAppend16Writers: each writer appends one row per call, each
// its own transaction, as rehearse and record do.
func BenchmarkAppend16Writers(b *testing.B) {
	s, _ := open(b, Options{MaxConns: benchClaimers})
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(max(1, benchClaimers/max(1, testingProcs())))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			r := ledgerfile.Row{TS: time.Unix(n, 0), Job: fmt.Sprintf("job-%d", n), Attempt: 1, Seat: "scratch",
				Wait: time.Second, Elapsed: 2 * time.Second, Tokens: 100, Outcome: admit.OK, Decision: "admit"}
			if err := s.Append(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }
