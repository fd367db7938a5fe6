package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore/pgtest"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/proxy/metrics"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// sharedPair is two proxies in front of one seat server, keeping their
// books in one throwaway PostgreSQL database, on one clock.
type sharedPair struct {
	px  [2]*running
	db  *pgstore.Store
	url string // the database's
	srv *seatserver.Server
	clk *clock
}

func startShared(t *testing.T, pol rehearse.Policy, c seat.Config, plan seat.Plan) *sharedPair {
	t.Helper()
	u := pgtest.DB(t) // skips without a test server (.ci/postgres.sh)
	_, err := pgstore.Init(context.Background(), u)
	require.NoError(t, err)
	base, srv := upstreamAt(t, seatserver.OpenAI, plan)
	c.BaseURL = base
	sp := &sharedPair{srv: srv, clk: &clock{}, url: u}
	for i := range sp.px {
		// Each proxy has a store of its own, as two machines would; the
		// stores' clock is the test's (else the server's).
		st, err := pgstore.Open(context.Background(), u, pgstore.Options{Now: sp.clk.Now})
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		sp.px[i] = start(t, pol, []seat.Config{c}, func(o *Options) { o.Books, o.Now, o.Run = st, sp.clk.Now, i+1 })
		if i == 0 {
			sp.db = st
		}
	}
	return sp
}

func (sp *sharedPair) jobRows(t *testing.T, job string) []ledgerfile.Row {
	t.Helper()
	rs, err := sp.db.ReadJob(context.Background(), job)
	require.NoError(t, err)
	return rs
}

const sharedBody = `{"model":"m1","messages":[{"role":"user","content":"hi"}]}`

// Two proxies on one database share one attempt cap per job, and run
// its requests one at a time (a lease in its book): of ten concurrent
// requests for one job, split between them, three are sent and seven
// get 503 attempt cap, whichever proxy they reach; the log holds the
// three attempts once each, and every row in attempt order.
func TestSharedBooksAttemptCap(t *testing.T) {
	pol := testPolicy()
	pol.Budget.MaxAttempts = 3
	plan := okPlan
	plan.Elapsed = 80 * ms // long enough for the ten to overlap
	sp := startShared(t, pol, seatCfg("s", "openai", ""), plan)

	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, 10)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			resp, body := post(t, sp.px[i%2].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "cap-job")
			answers <- answer{resp.StatusCode, body}
		})
	}
	wg.Wait()
	close(answers)
	byStatus := map[int]int{}
	for a := range answers {
		byStatus[a.status]++
		if a.status == 503 {
			assert.Contains(t, a.body, "refuse: attempt cap for job cap-job")
		}
	}
	assert.Equal(t, map[int]int{200: 3, 503: 7}, byStatus)
	assert.Equal(t, 3, sp.srv.Total(), "the seat saw three attempts in all")

	sent := 0
	seen := map[int]bool{}
	for _, r := range sp.jobRows(t, "cap-job") {
		assert.False(t, seen[r.Attempt], "attempt %d logged twice", r.Attempt)
		seen[r.Attempt] = true
		if r.WasSent() {
			sent++
			assert.Equal(t, admit.OK, r.Outcome)
		} else {
			assert.Equal(t, "refuse: attempt cap", r.Decision)
		}
	}
	assert.Equal(t, 3, sent)

	// The next request, to either proxy, is refused the same way.
	for _, px := range sp.px {
		resp, body := post(t, px.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "cap-job")
		assert.Equal(t, 503, resp.StatusCode)
		assert.Contains(t, body, "attempt cap")
	}
	assert.Equal(t, 3, sp.srv.Total())

	// The rows are in attempt order, each refusal after the attempts its
	// decision counted, and a replay under the policy changes no decision.
	rs := sp.jobRows(t, "cap-job")
	require.Len(t, rs, 12)
	for i, r := range rs {
		assert.Equal(t, i+1, r.Attempt, "rows in attempt order")
		if !r.WasSent() {
			assert.Equal(t, 3, r.Used, "attempt %d: the attempts its decision counted", r.Attempt)
		}
	}
	assertReplaysUnchanged(t, pol, rs)
}

// The spend ceiling is one per job across proxies: two answers of $0.02
// (one through each proxy) leave too little of $0.05 for a third, which
// either proxy refuses. With books of its own, the first proxy would
// have seen $0.02 spent and sent it.
func TestSharedBooksSpendCeiling(t *testing.T) {
	pol := testPolicy()
	pol.Budget.MaxAttempts = 10
	pol.Budget.MaxSpendUSD = 0.05
	c := seatCfg("s", "openai", "")
	c.PriceIn, c.PriceOut = 1000, 1000 // 12 + 8 tokens: $0.02 an answer
	sp := startShared(t, pol, c, okPlan)

	for i := range 2 {
		resp, _ := post(t, sp.px[i].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "spend-job")
		require.Equal(t, 200, resp.StatusCode)
	}
	resp, body := post(t, sp.px[0].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "spend-job")
	assert.Equal(t, 503, resp.StatusCode)
	assert.Contains(t, body, "refuse: spend ceiling for job spend-job: the job spent $0.0400 of $0.0500")
	assert.Equal(t, 2, sp.srv.Total())

	// The refusal is a row of the job too.
	rs := sp.jobRows(t, "spend-job")
	require.Len(t, rs, 3)
	assert.Equal(t, []int{1, 2, 3}, []int{rs[0].Attempt, rs[1].Attempt, rs[2].Attempt})
	assert.Equal(t, "refuse: spend ceiling", rs[2].Decision)
	assert.False(t, rs[2].WasSent())
	assert.InDelta(t, 0.02, rs[1].SpentUSD, 1e-9, "the second proxy's row carries the first proxy's spend")
}

// The deadline is made at the job's first request, by whichever proxy
// gets it, and inherited by the other: past it, the second proxy answers
// 504 without sending.
func TestSharedBooksDeadlineInherited(t *testing.T) {
	pol := testPolicy()
	pol.Budget.MaxAttempts = 5
	sp := startShared(t, pol, seatCfg("s", "openai", ""), okPlan)

	resp, _ := post(t, sp.px[0].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "late-job")
	require.Equal(t, 200, resp.StatusCode)
	sp.clk.Advance(pol.Budget.Deadline + time.Second)
	resp, body := post(t, sp.px[1].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "late-job")
	assert.Equal(t, 504, resp.StatusCode)
	assert.Contains(t, body, fmt.Sprintf("the job's %s deadline is gone", pol.Budget.Deadline))
	assert.Equal(t, 1, sp.srv.Total())

	// A job the second proxy starts now gets a deadline of its own.
	resp, _ = post(t, sp.px[1].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "new-job")
	assert.Equal(t, 200, resp.StatusCode)
	for _, r := range sp.jobRows(t, "late-job") {
		assert.False(t, strings.HasPrefix(r.Decision, "admit") && r.Attempt > 1, "no second attempt was admitted")
	}
}

// A job's shared book is forgotten by the store after its deadline and
// retention, by the sweep of whichever proxy gets to it first, once;
// forgetting writes no row (every request's rows are the job's whole
// story: a reader ends a named job as the writer would have).
func TestSharedBooksSweep(t *testing.T) {
	pol := testPolicy()
	pol.Budget.MaxAttempts = 5
	sp := startShared(t, pol, seatCfg("s", "openai", ""), seat.Plan{Status: 401, Elapsed: 5 * ms})

	resp, _ := post(t, sp.px[0].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "open-job")
	require.Equal(t, 401, resp.StatusCode, "the provider's answer: a permanent error is not retried")
	rs := sp.jobRows(t, "open-job")
	require.Len(t, rs, 2, "the failed attempt, then the refusal that ends the request")
	assert.Equal(t, "refuse: permanent error", rs[1].Decision)

	count := func() int {
		keys, err := sp.db.Due(context.Background(), 10)
		require.NoError(t, err)
		return len(keys)
	}
	sp.clk.Advance(pol.Budget.Deadline + time.Second)
	var wg sync.WaitGroup
	for _, px := range sp.px {
		wg.Go(px.px.Sweep)
	}
	wg.Wait()
	assert.Equal(t, 0, count(), "not due until its retention is over")
	sp.clk.Advance(DefaultRetention)
	assert.Equal(t, 1, count())
	sp.px[1].px.Sweep()
	assert.Equal(t, 0, count())
	assert.Len(t, sp.jobRows(t, "open-job"), 2, "forgetting writes nothing")
}

// BenchmarkSharedBooks is what the shared books cost a named request:
// the same request through a proxy keeping its books in process, then
// through one keeping them in PostgreSQL (two transactions a request),
// each request its own job. It needs the test server:
//
//	.ci/postgres.sh go test ./rehearse/proxy -run '^$' -bench SharedBooks -benchtime 2000x
func BenchmarkSharedBooks(b *testing.B) {
	u := pgtest.DB(b)
	_, err := pgstore.Init(context.Background(), u)
	require.NoError(b, err)
	st, err := pgstore.Open(context.Background(), u, pgstore.Options{MaxConns: 32})
	require.NoError(b, err)
	b.Cleanup(func() { st.Close() })
	base, _ := upstreamAt(b, seatserver.OpenAI, seat.Plan{PromptTokens: 5, CompletionTokens: 5})
	pol := testPolicy()
	mem := start(b, pol, []seat.Config{seatCfg("s", "openai", base)})
	shared := start(b, pol, []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) { o.Books = st })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, conc := range []int{1, 16} {
		b.Run(fmt.Sprintf("c=%d", conc), func(b *testing.B) {
			run := func(url string, n int) []time.Duration {
				tag := fmt.Sprintf("bench-%d-", benchRun.Add(1))
				return namedLatencies(b, client, url, conc, n, func(i int) string { return tag + fmt.Sprint(i) })
			}
			n := max(b.N, 100)
			b.ResetTimer()
			m, s := run(mem.url, n), run(shared.url, n)
			b.StopTimer()
			b.ReportMetric(latencyMS(m, 0.5), "in-process-p50-ms")
			b.ReportMetric(latencyMS(s, 0.5), "shared-p50-ms")
			b.ReportMetric(latencyMS(s, 0.99), "shared-p99-ms")
		})
	}
}

// A proxy on PostgreSQL that dies mid-attempt: past the attempt's hard
// timeout and grace, the other proxy writes its row (a timeout: its
// outcome is unknown), so under a cap of two the job gets one more
// attempt, its third request is refused with used=2, the rows are
// attempts 1, 2, 3 in order, and a replay changes no decision.
func TestSharedBooksLostAttemptPostgres(t *testing.T) {
	pol := testPolicy() // max_attempts 2, hard 5s
	pol.Budget.Deadline = 10 * time.Minute
	sp := startShared(t, pol, seatCfg("s", "openai", ""), okPlan)
	st, err := pgstore.Open(context.Background(), sp.url, pgstore.Options{Now: sp.clk.Now})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	dying, err := New(Options{Policy: pol, Chain: []seat.Config{sp.px[0].px.seats[0].cfg}, Books: st, Now: sp.clk.Now})
	require.NoError(t, err)
	t.Cleanup(dying.Close)
	admitThenDie(t, dying, "pg-lost")

	sp.clk.Advance(pol.Timeouts.Hard + flightGrace + time.Second)
	resp, _ := post(t, sp.px[0].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "pg-lost")
	assert.Equal(t, 200, resp.StatusCode)
	resp, body := post(t, sp.px[1].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "pg-lost")
	assert.Equal(t, 503, resp.StatusCode)
	assert.Contains(t, body, "the job used 2 of 2 attempts")

	rs := sp.jobRows(t, "pg-lost")
	require.Len(t, rs, 3)
	for i, r := range rs {
		assert.Equal(t, i+1, r.Attempt, "rows in attempt order")
	}
	assert.Equal(t, admit.Timeout, rs[0].Outcome, "the lost attempt's row")
	assert.Equal(t, 2, rs[2].Used)
	assertReplaysUnchanged(t, pol, rs)
}

// namedLatencies sends n requests, each its own named job (id(i)), to
// url's chat endpoint from conc clients at once, and returns their
// latencies, sorted.
func namedLatencies(b *testing.B, client *http.Client, url string, conc, n int, id func(i int) string) []time.Duration {
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range conc {
		wg.Go(func() {
			for i := range next {
				req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(sharedBody))
				req.Header.Set("X-Retrygate-Job", id(i))
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[i] = time.Since(t0)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	slices.Sort(lat)
	return lat
}

// benchRun numbers the benchmarks' runs, so each run's jobs are new ones
// (a benchmark function runs again with a larger b.N).
var benchRun atomic.Int64

// latencyMS is the q-quantile (nearest rank) of sorted latencies, in ms.
func latencyMS(l []time.Duration, q float64) float64 {
	return float64(l[min(len(l)-1, int(q*float64(len(l))))]) / float64(time.Millisecond)
}

// A job whose shared book was forgotten at its deadline plus the
// retention is not started again under its name, on any proxy: its
// attempt 1 would be a second row for (job, 1), which the database
// refuses only after the attempt was sent. A request naming it gets 410
// job_forgotten with a row of its own, and nothing is sent.
func TestSharedBooksJobNamedAgainAfterRetention(t *testing.T) {
	pol := testPolicy()
	sp := startShared(t, pol, seatCfg("s", "openai", ""), okPlan)

	resp, _ := post(t, sp.px[0].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "old-job")
	require.Equal(t, 200, resp.StatusCode)
	sp.clk.Advance(pol.Budget.Deadline + DefaultRetention)
	sp.px[0].px.Sweep()
	for i := range sp.px {
		resp, body := post(t, sp.px[i].url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "old-job")
		assert.Equal(t, http.StatusGone, resp.StatusCode, "proxy %d: %s", i, body)
		assert.Equal(t, "job_forgotten", resp.Header.Get("X-Retrygate-Refused"))
		assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	}
	// No failure of the store's: a proxy counting its writes stays ready.
	m := metrics.New(metrics.Options{})
	third := start(t, pol, []seat.Config{sp.px[0].px.seats[0].cfg}, func(o *Options) {
		o.Books, o.Now, o.Run = m.Books(sp.db), sp.clk.Now, 3
	})
	resp, body := post(t, third.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "old-job")
	assert.Equal(t, http.StatusGone, resp.StatusCode, body)
	assert.Equal(t, 0.0, figure(t, m, "retrygate_log_write_errors_total"))
	assert.NoError(t, m.Ready(context.Background()))
	assert.Equal(t, 1, sp.srv.Total(), "nothing more was sent")
	rs := sp.jobRows(t, "old-job")
	require.Len(t, rs, 1)
	keys, err := sp.db.Due(context.Background(), 10)
	require.NoError(t, err)
	assert.Empty(t, keys, "a forgotten book is never due again")
	for _, px := range sp.px {
		px.stop()
		n := 0
		for _, r := range px.rows.all() {
			if extra(r, KeyRefused) == "job_forgotten" {
				n++
				assert.True(t, isOwnID(r.Job), "the refusal is a job of its own: %s", r.Job)
				assert.Equal(t, "old-job", extra(r, KeyForJob))
			}
		}
		assert.Equal(t, 1, n, "each proxy's 410 has its row")
	}
}
