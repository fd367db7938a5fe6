package proxy

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// changedDecisions replays rows, in order, under pol with the replay
// `check --policy` runs (summary.Replayer) and lists the rows whose
// decision flips.
// The seats' context windows, when given, are check's (its policy's
// seats).
func changedDecisions(pol rehearse.Policy, rows []ledgerfile.Row, seats ...seat.Config) []string {
	byName := map[string]seat.Config{}
	for _, c := range seats {
		byName[c.Name] = c
	}
	rp := summary.NewReplayer(pol.Budget, pol.Retry).WithWindows(rehearse.Windows(byName))
	var out []string
	for i := range rows {
		r := rows[i]
		if got := rp.Add(&r, "log"); got.Changed() {
			out = append(out, ledgerfile.FormatRow(&rows[i])+"  => now "+got.Now)
		}
	}
	return out
}

func assertReplaysUnchanged(t testing.TB, pol rehearse.Policy, rows []ledgerfile.Row, seats ...seat.Config) {
	t.Helper()
	assert.Empty(t, changedDecisions(pol, rows, seats...), "decisions that change on a replay under the policy that wrote them")
}

// readAsReport reads a log's text as report and check do: every row
// parses (one row for each job and attempt), a replay under pol changes
// no decision, and the whole log's figures are returned.
func readAsReport(t *testing.T, pol rehearse.Policy, log string) *summary.Group {
	t.Helper()
	read, _, err := ledgerfile.ReadAll(strings.NewReader(log), "rehearsal.log")
	require.NoError(t, err, "the log reads: one row for each (job, attempt)")
	assertReplaysUnchanged(t, pol, read)
	sum := summary.New(summary.Options{})
	for i := range read {
		sum.Add(&read[i], "rehearsal.log")
	}
	return sum.Close().All
}

// jobDecisions are the decision column of one job's rows, in log order.
func jobDecisions(rows []ledgerfile.Row, job string) []string {
	var out []string
	for _, r := range rows {
		if r.Job == job {
			out = append(out, r.Decision)
		}
	}
	return out
}

const streamBody = `{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// sdkLike sends one job's request as the official SDKs retry it: until
// a 200, or an answer that says not to retry (x-should-retry: false),
// at most tries times; but at once, sooner than any Retry-After (the
// proxy must judge the retry as the loop would after its sleep).
func sdkLike(t *testing.T, url, job string, tries int) {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second}
	for range tries {
		req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(streamBody))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Retrygate-Job", job)
		resp, err := c.Do(req)
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			continue // a stream cut mid-answer: the SDKs retry it
		}
		if resp.StatusCode == 200 || resp.Header.Get("X-Should-Retry") == "false" {
			return
		}
	}
}

// The loop and the proxy make the same decisions on the same answers:
// each sequence of upstream answers is played by a script seat on the
// virtual clock (rehearse) and by a seat server behind the proxy, whose
// one request runs the policy's loop live (its waits real, its
// failovers inside the request); the decision and seat columns agree,
// and a replay of the proxy's log changes none. The first case is the
// issue's: a 429 whose Retry-After (60 s) is past the 45 s deadline is
// refused at once by both, never forwarded again. Then the same, as
// concurrent load: `check --policy` on the proxy's log changes nothing.
func TestLoopAndProxyDecideAlike(t *testing.T) {
	ok := seat.Plan{Wait: 5 * ms, Elapsed: 10 * ms, PromptTokens: 12, CompletionTokens: 8}
	hang := seat.Plan{Hang: true, TTFB: time.Hour}
	cases := []struct {
		name     string
		plans    []seat.Plan
		fallback bool // a second seat in the chain, answering ok
		want     []string
		seats    string // the rows' seats, a letter each: p(rimary), f(allback)
	}{
		{"429 Retry-After past the deadline", []seat.Plan{{Status: 429, Elapsed: 2 * ms, RetryAfter: 60 * time.Second, HasRetryAfter: true}}, false,
			[]string{"admit", "refuse: deadline"}, "pp"},
		{"429 Retry-After within the deadline", []seat.Plan{{Status: 429, Elapsed: 2 * ms, RetryAfter: time.Second, HasRetryAfter: true}, ok}, false,
			[]string{"admit", "admit"}, "pp"},
		{"429 Retry-After leaving too little for the estimate", []seat.Plan{
			{Status: 429, Elapsed: 2 * ms, RetryAfter: time.Second, HasRetryAfter: true},
			{Status: 429, Elapsed: 2 * ms, RetryAfter: 44 * time.Second, HasRetryAfter: true}}, false,
			[]string{"admit", "admit", "refuse: deadline"}, "ppp"},
		{"500 fast", []seat.Plan{{Status: 500, Elapsed: 2 * ms}}, false,
			[]string{"admit", "admit", "admit", "refuse: attempt cap"}, "pppp"},
		{"500 slow", []seat.Plan{{Status: 500, Elapsed: 80 * ms}}, false,
			[]string{"admit", "admit", "refuse: retry limit"}, "ppp"},
		{"401", []seat.Plan{{Status: 401, Elapsed: 2 * ms}}, false,
			[]string{"admit", "refuse: permanent error"}, "pp"},
		{"timeout", []seat.Plan{hang}, false,
			[]string{"admit", "admit", "refuse: retry limit"}, "ppp"},
		{"timeout, then the fallback", []seat.Plan{hang}, true,
			[]string{"admit", "admit"}, "pf"},
		{"500 fast, then ok", []seat.Plan{{Status: 500, Elapsed: 2 * ms}, ok}, false,
			[]string{"admit", "admit"}, "pp"},
	}
	pol := testPolicy()
	pol.Budget = admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 100_000, MaxAttempts: 3, MaxWait: time.Second}
	pol.Timeouts = rehearse.Timeouts{Hard: 300 * ms}
	pol.Retry = admit.RetryPolicy{BaseDelay: ms, MaxDelay: ms, SlowServerAfter: 50 * ms, HonorRetryAfter: true, TimeoutsRetried: 1}
	letters := func(rs []ledgerfile.Row, job string) string {
		var b strings.Builder
		for _, r := range rs {
			if r.Job == job {
				b.WriteByte(r.Seat[0])
			}
		}
		return b.String()
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var loopRows []ledgerfile.Row
			specs := []rehearse.SeatSpec{{Config: seat.Config{Name: "p", Model: "m-p"}, Planner: plans(c.plans)}}
			if c.fallback {
				specs = append(specs, rehearse.SeatSpec{Config: seat.Config{Name: "f", Model: "m-f"}, Planner: plans{ok}})
			}
			l, err := rehearse.New(rehearse.Config{
				Policy: pol, Rand: rand.New(rand.NewPCG(1, 2)), Run: 1, Jobs: 1, Prompt: "p", MaxTokens: 16,
				Seats: specs, Sink: func(r *ledgerfile.Row) { loopRows = append(loopRows, *r) },
			})
			require.NoError(t, err)
			_, err = l.RunVirtual(rehearse.VirtualOptions{Jobs: 1, Start: fixedNow()})
			require.NoError(t, err)
			assert.Equal(t, c.want, jobDecisions(loopRows, "r1-1"), "the loop\n%s", rowsText(loopRows))
			assert.Equal(t, c.seats, letters(loopRows, "r1-1"), "the loop's seats")

			base, _ := upstreamAt(t, seatserver.OpenAI, c.plans...)
			chain := []seat.Config{seatCfg("p", "openai", base)}
			if c.fallback {
				fbase, _ := upstreamAt(t, seatserver.OpenAI, ok)
				chain = append(chain, seatCfg("f", "openai", fbase))
			}
			px := start(t, pol, chain)
			sdkLike(t, px.url, "job", 6)
			px.stop()
			got := px.rows.all()
			assert.Equal(t, c.want, jobDecisions(got, "job"), "the proxy\n%s", px.rows.text())
			assert.Equal(t, c.seats, letters(got, "job"), "the proxy's seats")
			assertReplaysUnchanged(t, pol, got)
		})
	}
	t.Run("concurrent load", func(t *testing.T) {
		answers := []seat.Plan{{Status: 500, Elapsed: 2 * ms}, ok, {Status: 429, Elapsed: 2 * ms, RetryAfter: 0, HasRetryAfter: true},
			{Status: 500, Elapsed: 80 * ms}, ok, {Status: 401, Elapsed: 2 * ms}, ok, hang}
		var cycle plans
		for range 40 {
			cycle = append(cycle, answers...)
		}
		base, _ := upstreamAt(t, seatserver.OpenAI, cycle...)
		fbase, _ := upstreamAt(t, seatserver.OpenAI, ok)
		px := start(t, pol, []seat.Config{seatCfg("p", "openai", base), seatCfg("f", "openai", fbase)})
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Go(func() { sdkLike(t, px.url, fmt.Sprintf("load-%d", i%12), 3) })
		}
		wg.Wait()
		px.stop()
		rs := px.rows.all()
		require.NotEmpty(t, rs)
		assertReplaysUnchanged(t, pol, rs)
	})
}

// Concurrent requests of one job run one at a time: each waits for the
// one before it to end, then continues the job as its next client
// retry. Six at once under a cap of three send three attempts, never
// two at once upstream; the rows are attempts 1 … 6 in order, the
// refusals with used=3, the job's last row says it succeeded, and
// `check --policy` on the log changes nothing.
func TestConcurrentRequestsRowsTellTheTruth(t *testing.T) {
	pol := testPolicy()
	pol.Budget.MaxAttempts = 3
	base, srv := upstreamAt(t, seatserver.OpenAI, seat.Plan{Wait: 150 * ms, Elapsed: 200 * ms, PromptTokens: 12, CompletionTokens: 8})
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() { post(t, px.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "six") })
	}
	wg.Wait()
	px.stop()
	rs := px.rows.all()
	require.Len(t, rs, 6)
	assert.Equal(t, 3, srv.Total())
	for i := 1; i < 3; i++ {
		prev := rs[i-1].TS.Add(rs[i-1].Elapsed - ms) // elapsed is rounded to the millisecond
		assert.False(t, rs[i].TS.Before(prev), "attempt %d was decided while %d was in flight", i+1, i)
	}
	for i, r := range rs {
		assert.Equal(t, i+1, r.Attempt, "rows in attempt order")
		assert.Zero(t, r.InFlight)
		if i >= 3 {
			assert.Equal(t, "refuse: attempt cap", r.Decision)
			assert.Equal(t, 3, r.Used, "a refusal's used is the attempts its decision counted")
		} else {
			assert.Equal(t, "admit", r.Decision)
		}
	}
	assertReplaysUnchanged(t, pol, rs)
}

func rowsText(rs []ledgerfile.Row) string {
	var b []byte
	for i := range rs {
		b = ledgerfile.AppendRow(b, &rs[i])
	}
	return string(b)
}
