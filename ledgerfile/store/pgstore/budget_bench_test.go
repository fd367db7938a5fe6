package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
)

// benchBook is what a retry budget shared through the books would cost a
// request: one more Book transaction, on one key every proxy shares (the
// budget's counters, a second a bucket over a 10 s window), against the
// same transaction on a key of the request's own (a job's book). The gap
// is the hot row's lock, which serialises every request of every proxy.
//
//	.ci/postgres.sh go test ./ledgerfile/store/pgstore -run '^$' -bench 'Book(OneKey|OwnKeys)' -benchtime 2000x
func benchBook(b *testing.B, oneKey bool) {
	s, _ := open(b, Options{MaxConns: benchClaimers})
	ctx := context.Background()
	var next atomic.Int64
	type counters struct {
		Second  []int64 `json:"s"`
		Firsts  []int64 `json:"f"`
		Retries []int64 `json:"r"`
	}
	b.SetParallelism(max(1, benchClaimers/max(1, testingProcs())))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := "retry budget" // a space: never a job id
			if !oneKey {
				key = fmt.Sprintf("job-%d", next.Add(1))
			}
			err := s.Book(ctx, key, func(old []byte, now time.Time) (store.Record, []ledgerfile.Row, error) {
				var c counters
				if old != nil {
					if err := json.Unmarshal(old, &c); err != nil {
						return store.Record{}, nil, err
					}
				}
				sec := now.Unix()
				if len(c.Second) == 0 || c.Second[len(c.Second)-1] != sec {
					c.Second, c.Firsts, c.Retries = append(c.Second, sec), append(c.Firsts, 0), append(c.Retries, 0)
				}
				for len(c.Second) > 10 {
					c.Second, c.Firsts, c.Retries = c.Second[1:], c.Firsts[1:], c.Retries[1:]
				}
				c.Firsts[len(c.Firsts)-1]++
				data, err := json.Marshal(c)
				return store.Record{Data: data, Due: now.Add(time.Hour)}, nil, err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "books/s")
}

func BenchmarkBookOneKey(b *testing.B)  { benchBook(b, true) }
func BenchmarkBookOwnKeys(b *testing.B) { benchBook(b, false) }
