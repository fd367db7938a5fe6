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

// TestRetryBudget503: the retry budget (50% of first attempts, no
// floor) judges every retry the proxy's loop would make, across jobs: a
// job whose retry it refuses ends there, its client getting the
// provider's last answer (told not to retry), and the refusal's row
// carries the counts it was judged on, which the replay agrees with. A
// client's own retry that comes anyway is judged the same, and refused
// before it reaches the provider: 503 in the provider's shape. A first
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
			// a: 1 first, its retry over 0.5 × 1; b: 2 firsts, one retry
			// (1 ≤ 1), its second over; c: 3 firsts, 2 > 1.5.
			for _, job := range []string{"a", "b", "c"} {
				resp, _ := post(t, px.url+k.path, k.body, "X-Retrygate-Job", job)
				require.Equal(t, 500, resp.StatusCode, "a first attempt is never refused by the budget; the provider's last answer")
				assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
			}
			assert.Equal(t, 4, srv.Total(), "a, b twice, c")
			resp, body := post(t, px.url+k.path, k.body, "X-Retrygate-Job", "a", "X-Stainless-Retry-Count", "1")
			require.Equal(t, 503, resp.StatusCode)
			assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
			assert.Equal(t, "retry_budget", resp.Header.Get("X-Retrygate-Refused"))
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &v))
			msg := "retrygate: refuse: retry budget for job a: the retries of every job are over the retry budget (0.5 of first attempts + 0/s over 1m0s)"
			switch k.kind {
			case "openai":
				assert.Equal(t, msg, v["error"].(map[string]any)["message"])
				assert.Equal(t, "retry_budget", v["error"].(map[string]any)["code"])
			case "anthropic":
				assert.Equal(t, msg, v["error"].(map[string]any)["message"])
			case "ollama":
				assert.Equal(t, msg, v["error"])
			}
			assert.Equal(t, 4, srv.Total(), "the refused retry never reached the provider")

			rs := px.rows.wait(t, 8)
			want := map[string][]admit.BudgetWindow{ // each job's judged rows' windows, in order
				"a": {{Firsts: 1}, {Firsts: 3, Retries: 1}},
				"b": {{Firsts: 2}, {Firsts: 2, Retries: 1}},
				"c": {{Firsts: 3, Retries: 1}},
			}
			got := map[string][]admit.BudgetWindow{}
			for _, r := range rs {
				if r.Attempt == 1 {
					assert.Equal(t, "admit", r.Decision)
				}
				if r.HasWindow {
					got[r.Job] = append(got[r.Job], r.Window)
				}
				if r.Decision == "refuse: retry budget" {
					assert.True(t, r.Unsent)
					assert.False(t, pol.Retry.Budget.Admits(r.Window), "refused on counts over the budget: %v", r.Window)
				}
			}
			assert.Equal(t, want, got)
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
// share one retry budget: the second judges its jobs' retries on the
// first's first attempts and retries too (the windows on its rows say
// so).
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
	for _, job := range []string{"a", "b"} { // a: its retry refused; b: one retry
		resp, _ := post(t, one.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", job)
		require.Equal(t, 500, resp.StatusCode)
	}
	for _, job := range []string{"c", "d"} { // c: 2 > 1.5, refused; d: 2 ≤ 2, one retry
		resp, _ := post(t, two.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", job)
		require.Equal(t, 500, resp.StatusCode)
	}
	assert.Equal(t, 6, srv.Total())
	rs := fb.rows.all()
	windows := map[string][]admit.BudgetWindow{}
	for _, r := range rs {
		if r.HasWindow {
			windows[r.Job] = append(windows[r.Job], r.Window)
		}
	}
	assert.Equal(t, map[string][]admit.BudgetWindow{
		"a": {{Firsts: 1}},
		"b": {{Firsts: 2}, {Firsts: 2, Retries: 1}},
		"c": {{Firsts: 3, Retries: 1}},
		"d": {{Firsts: 4, Retries: 1}, {Firsts: 4, Retries: 2}},
	}, windows, "the second proxy's windows hold the first's attempts")
	assertReplaysUnchanged(t, pol, rs)
}

// TestRetryBudgetSharedPostgreSQL: two proxies on one PostgreSQL share
// the retry budget while their jobs run at once: four jobs' first
// attempts allow two retries (ratio 0.5) in all, however their requests
// interleave, each retry judged in the transaction that counts it, so
// no two proxies both take the last one; every refusal was judged on
// counts over the budget, and each job's rows replay unchanged.
func TestRetryBudgetSharedPostgreSQL(t *testing.T) {
	pol := testPolicy()
	pol.Budget.MaxAttempts = 3
	pol.Breaker.FailureRate = 0
	pol.Retry.Budget = admit.RetryBudgetConfig{Ratio: 0.5, Window: time.Minute}
	sp := startShared(t, pol, seatCfg("s", "openai", ""), seat.Plan{Status: 500, Elapsed: 20 * ms})
	jobs := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() {
			resp, _ := post(t, sp.px[i%2].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", job)
			assert.Equal(t, 500, resp.StatusCode)
		})
	}
	wg.Wait()
	var all []ledgerfile.Row
	for _, job := range jobs {
		all = append(all, sp.jobRows(t, job)...)
	}
	retries := 0
	for _, r := range all {
		switch {
		case !r.Unsent && r.Attempt > 1:
			retries++
		case r.Decision == "refuse: retry budget":
			assert.False(t, pol.Retry.Budget.Admits(r.Window), "refused on counts over the budget: %v", r.Window)
		}
	}
	assert.LessOrEqual(t, retries, 2, "0.5 × 4 first attempts")
	assert.Equal(t, 4+retries, sp.srv.Total())
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
