package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore/pgtest"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// TestRetryBudget503: three jobs' first requests fail; the budget (50%
// of first attempts, no floor) lets one retry through, and the next
// job's retry is refused before it reaches the provider: 503 in the
// provider's shape, the SDKs told not to retry, and a row that carries
// the counts it was judged on, which the replay agrees with. A first
// attempt is never refused by the budget.
func TestRetryBudget503(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.kind, func(t *testing.T) {
			base, srv := upstreamAt(t, k.format, seat.Plan{Status: 500, Elapsed: 5 * ms})
			pol := testPolicy()
			pol.Budget.MaxAttempts = 3
			pol.Breaker.FailureRate = 0
			pol.Retry.Budget = admit.RetryBudgetConfig{Ratio: 0.5, Window: time.Minute}
			px := start(t, pol, []seat.Config{seatCfg("s", k.kind, base)})
			for _, job := range []string{"a", "b", "c"} {
				resp, _ := post(t, px.url+k.path, k.body, "X-Retrygate-Job", job)
				require.Equal(t, 500, resp.StatusCode, "a first attempt is never refused by the budget")
			}
			resp, _ := post(t, px.url+k.path, k.body, "X-Retrygate-Job", "a")
			require.Equal(t, 500, resp.StatusCode, "one retry in 0.5 × 3 first attempts")
			resp, body := post(t, px.url+k.path, k.body, "X-Retrygate-Job", "b")
			require.Equal(t, 503, resp.StatusCode)
			assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
			assert.Equal(t, "retry_budget", resp.Header.Get("X-Retrygate-Refused"))
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &v))
			msg := "retrygate: refuse: retry budget for job b: the retries of every job are over the retry budget (0.5 of first attempts + 0/s over 1m0s)"
			switch k.kind {
			case "openai":
				assert.Equal(t, msg, v["error"].(map[string]any)["message"])
				assert.Equal(t, "retry_budget", v["error"].(map[string]any)["code"])
			case "anthropic":
				assert.Equal(t, msg, v["error"].(map[string]any)["message"])
			case "ollama":
				assert.Equal(t, msg, v["error"])
			}
			assert.Len(t, srv.Requests(), 4, "the refused retry never reached the provider")
			// A new job's first attempt still goes out.
			resp, _ = post(t, px.url+k.path, k.body, "X-Retrygate-Job", "d")
			assert.Equal(t, 500, resp.StatusCode)

			rs := px.rows.wait(t, 6)
			var refused, retried int
			for _, r := range rs {
				switch {
				case r.Decision == "refuse: retry budget":
					refused++
					assert.Equal(t, "b", r.Job)
					assert.True(t, r.Unsent)
					assert.Equal(t, admit.BudgetWindow{Firsts: 3, Retries: 1}, r.Window)
				case r.Attempt == 2:
					retried++
					assert.Equal(t, admit.BudgetWindow{Firsts: 3, Retries: 0}, r.Window)
				}
			}
			assert.Equal(t, 1, refused)
			assert.Equal(t, 1, retried)
			assertReplaysUnchanged(t, pol, rs)
		})
	}
}

// BookShared is fakeBooks' shared record: under its one lock, like Book.
func (f *fakeBooks) BookShared(_ context.Context, key, shared string, fn func(old, sharedOld []byte, now time.Time) (store.Record, []byte, []ledgerfile.Row, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var data, sdata []byte
	if old, ok := f.recs[key]; ok {
		data = slices.Clone(old.Data)
	}
	if old, ok := f.recs[shared]; ok {
		sdata = slices.Clone(old.Data)
	}
	rec, srec, rs, err := fn(data, sdata, f.now())
	if err != nil {
		return err
	}
	if rec.Data == nil {
		delete(f.recs, key)
	} else {
		f.recs[key] = rec
	}
	f.recs[shared] = store.Record{Data: srec, Due: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}
	return f.rows.add(rs)
}

// TestRetryBudgetShared: two proxies keeping their books in one store
// share one retry budget. Four first attempts through the first proxy
// allow two retries (ratio 0.5); the first retry through each proxy is
// admitted, and the third, through either, is refused.
func TestRetryBudgetShared(t *testing.T) {
	base, srv := upstreamAt(t, seatserver.OpenAI, seat.Plan{Status: 500, Elapsed: 5 * ms})
	pol := testPolicy()
	pol.Budget.MaxAttempts = 3
	pol.Breaker.FailureRate = 0
	pol.Retry.Budget = admit.RetryBudgetConfig{Ratio: 0.5, Window: time.Minute}
	clk := &clock{}
	fb := &fakeBooks{now: clk.Now, recs: map[string]store.Record{}}
	chain := []seat.Config{seatCfg("s", "openai", base)}
	one := start(t, pol, chain, func(o *Options) { o.Books, o.Now = fb, clk.Now })
	two := start(t, pol, chain, func(o *Options) { o.Books, o.Now = fb, clk.Now })
	for _, job := range []string{"a", "b", "c", "d"} {
		resp, _ := post(t, one.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", job)
		require.Equal(t, 500, resp.StatusCode)
	}
	resp, _ := post(t, one.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "a")
	require.Equal(t, 500, resp.StatusCode)
	resp, _ = post(t, two.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "b")
	require.Equal(t, 500, resp.StatusCode, "the second proxy sees the first's four first attempts")
	resp, body := post(t, two.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "c")
	assert.Equal(t, 503, resp.StatusCode, "the first proxy's retry counts against the second's")
	assert.Contains(t, body, "refuse: retry budget for job c")
	resp, _ = post(t, one.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "d")
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, 6, srv.Total())
	rs := fb.rows.all()
	require.Len(t, rs, 8)
	for _, r := range rs {
		if r.Job == "c" && r.Attempt == 2 {
			assert.Equal(t, admit.BudgetWindow{Firsts: 4, Retries: 2}, r.Window)
		}
	}
	assertReplaysUnchanged(t, pol, rs)
}

// TestRetryBudgetSharedPostgreSQL: two proxies on one database share the
// retry budget, and its count is taken under the shared record's lock:
// after four first attempts (ratio 0.5: two retries), four retries at
// once, split between the proxies, send exactly two.
func TestRetryBudgetSharedPostgreSQL(t *testing.T) {
	pol := testPolicy()
	pol.Budget.MaxAttempts = 3
	pol.Breaker.FailureRate = 0
	pol.Retry.Budget = admit.RetryBudgetConfig{Ratio: 0.5, Window: time.Minute}
	sp := startShared(t, pol, seatCfg("s", "openai", ""), seat.Plan{Status: 500, Elapsed: 20 * ms})
	jobs := []string{"a", "b", "c", "d"}
	for i, job := range jobs {
		resp, _ := post(t, sp.px[i%2].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", job)
		require.Equal(t, 500, resp.StatusCode)
	}
	statuses := make(chan int, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() {
			resp, _ := post(t, sp.px[i%2].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", job)
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(statuses)
	by := map[int]int{}
	for s := range statuses {
		by[s]++
	}
	assert.Equal(t, map[int]int{500: 2, 503: 2}, by)
	assert.Equal(t, 6, sp.srv.Total())
	var all []ledgerfile.Row
	for _, job := range jobs {
		all = append(all, sp.jobRows(t, job)...)
	}
	refused := 0
	for _, r := range all {
		if r.Decision == "refuse: retry budget" {
			refused++
			assert.Equal(t, admit.BudgetWindow{Firsts: 4, Retries: 2}, r.Window)
		}
	}
	assert.Equal(t, 2, refused)
	for _, job := range jobs {
		assertReplaysUnchanged(t, pol, sp.jobRows(t, job))
	}
}

// BenchmarkSharedBudget is what sharing the retry budget through the
// books costs a named request: the same requests through a proxy on
// PostgreSQL books without a budget, then with one (every admission also
// locks the budget's record), each request its own job.
//
//	.ci/postgres.sh go test ./rehearse/proxy -run '^$' -bench SharedBudget -benchtime 1000x
func BenchmarkSharedBudget(b *testing.B) {
	u := pgtest.DB(b)
	_, err := pgstore.Init(context.Background(), u)
	require.NoError(b, err)
	st, err := pgstore.Open(context.Background(), u, pgstore.Options{MaxConns: 32})
	require.NoError(b, err)
	b.Cleanup(func() { st.Close() })
	base, _ := upstreamAt(b, seatserver.OpenAI, seat.Plan{PromptTokens: 5, CompletionTokens: 5})
	plain := testPolicy()
	budgeted := testPolicy()
	budgeted.Retry.Budget = admit.RetryBudgetConfig{Ratio: 0.2, MinPerSecond: 1, Window: 10 * time.Second}
	off := start(b, plain, []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) { o.Books = st })
	on := start(b, budgeted, []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) { o.Books = st })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, conc := range []int{1, 16} {
		b.Run(fmt.Sprintf("c=%d", conc), func(b *testing.B) {
			run := func(url, tag string, n int) []time.Duration {
				return namedLatencies(b, client, url, conc, n, func(i int) string { return fmt.Sprintf("%s-%d-%d", tag, conc, i) })
			}
			n := max(b.N, 100)
			b.ResetTimer()
			tag := fmt.Sprint(benchRun.Add(1))
			a, c := run(off.url, tag+"off", n), run(on.url, tag+"on", n)
			b.StopTimer()
			b.ReportMetric(latencyMS(a, 0.5), "no-budget-p50-ms")
			b.ReportMetric(latencyMS(c, 0.5), "budget-p50-ms")
			b.ReportMetric(latencyMS(c, 0.99), "budget-p99-ms")
		})
	}
}
