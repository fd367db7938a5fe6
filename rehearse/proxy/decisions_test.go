package proxy

import (
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
func changedDecisions(pol rehearse.Policy, rows []ledgerfile.Row) []string {
	rp := summary.NewReplayer(pol.Budget, pol.Retry)
	var out []string
	for i := range rows {
		r := rows[i]
		if got := rp.Add(&r, "log"); got.Changed() {
			out = append(out, ledgerfile.FormatRow(&rows[i])+"  => now "+got.Now)
		}
	}
	return out
}

func assertReplaysUnchanged(t testing.TB, pol rehearse.Policy, rows []ledgerfile.Row) {
	t.Helper()
	assert.Empty(t, changedDecisions(pol, rows), "decisions that change on a replay under the policy that wrote them")
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
// client retries at once; the decision columns agree. The first case is
// the issue's: a 429 whose Retry-After (60 s) is past the 45 s deadline
// is refused at once by both, never forwarded again.
func TestLoopAndProxyDecideAlike(t *testing.T) {
	ok := seat.Plan{Wait: 5 * ms, Elapsed: 10 * ms, PromptTokens: 12, CompletionTokens: 8}
	cases := []struct {
		name  string
		plans []seat.Plan
		want  []string
	}{
		{"429 Retry-After past the deadline", []seat.Plan{{Status: 429, Elapsed: 2 * ms, RetryAfter: 60 * time.Second, HasRetryAfter: true}},
			[]string{"admit", "refuse: deadline"}},
		{"429 Retry-After within the deadline", []seat.Plan{{Status: 429, Elapsed: 2 * ms, RetryAfter: 2 * time.Second, HasRetryAfter: true}, ok},
			[]string{"admit", "admit"}},
		{"429 Retry-After leaving too little for the estimate", []seat.Plan{
			{Status: 429, Elapsed: 2 * ms, RetryAfter: time.Second, HasRetryAfter: true},
			{Status: 429, Elapsed: 2 * ms, RetryAfter: 44 * time.Second, HasRetryAfter: true}},
			[]string{"admit", "admit", "refuse: deadline"}},
		{"500 fast", []seat.Plan{{Status: 500, Elapsed: 2 * ms}},
			[]string{"admit", "admit", "admit", "refuse: attempt cap"}},
		{"500 slow", []seat.Plan{{Status: 500, Elapsed: 80 * ms}},
			[]string{"admit", "admit", "refuse: retry limit"}},
		{"401", []seat.Plan{{Status: 401, Elapsed: 2 * ms}},
			[]string{"admit", "refuse: permanent error"}},
		{"timeout", []seat.Plan{{TTFB: 5 * ms, Wait: 20 * ms, Elapsed: time.Second, CompletionTokens: 8}},
			[]string{"admit", "admit", "refuse: retry limit"}},
		{"500 fast, then ok", []seat.Plan{{Status: 500, Elapsed: 2 * ms}, ok},
			[]string{"admit", "admit"}},
	}
	pol := testPolicy()
	pol.Budget = admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 100_000, MaxAttempts: 3, MaxWait: 200 * ms}
	pol.Timeouts = rehearse.Timeouts{Hard: 300 * ms}
	pol.Retry = admit.RetryPolicy{BaseDelay: ms, MaxDelay: ms, SlowServerAfter: 50 * ms, HonorRetryAfter: true, TimeoutsRetried: 1}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var loopRows []ledgerfile.Row
			l, err := rehearse.New(rehearse.Config{
				Policy: pol, Rand: rand.New(rand.NewPCG(1, 2)), Run: 1, Jobs: 1, Prompt: "p", MaxTokens: 16,
				Seats: []rehearse.SeatSpec{{Config: seat.Config{Name: "s", Model: "m-s"}, Planner: plans(c.plans)}},
				Sink:  func(r *ledgerfile.Row) { loopRows = append(loopRows, *r) },
			})
			require.NoError(t, err)
			_, err = l.RunVirtual(rehearse.VirtualOptions{Jobs: 1, Start: fixedNow()})
			require.NoError(t, err)
			assert.Equal(t, c.want, jobDecisions(loopRows, "r1-1"), "the loop\n%s", rowsText(loopRows))

			base, _ := upstreamAt(t, seatserver.OpenAI, c.plans...)
			px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
			sdkLike(t, px.url, "job", 6)
			px.stop()
			got := px.rows.all()
			assert.Equal(t, c.want, jobDecisions(got, "job"), "the proxy\n%s", px.rows.text())
			assertReplaysUnchanged(t, pol, got)
		})
	}
}

// Concurrent requests of one job are decided on the attempts in flight,
// and their rows say so: six at once under a cap of three send three,
// the refusals' rows come after the three attempts' rows (attempt
// order) with used=3, and `check --policy` on the log changes nothing.
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
	for i, r := range rs {
		assert.Equal(t, i+1, r.Attempt, "rows in attempt order")
		if i >= 3 {
			assert.Equal(t, "refuse: attempt cap", r.Decision)
			assert.Equal(t, 3, r.Used, "a refusal's used is the attempts its decision counted, in flight included")
		} else {
			assert.Equal(t, "admit", r.Decision)
		}
	}
	assert.Equal(t, "succeeded", rs[5].JobEnd, "the job's last row says how it ended")
	assertReplaysUnchanged(t, pol, rs)
}

func rowsText(rs []ledgerfile.Row) string {
	var b []byte
	for i := range rs {
		b = ledgerfile.AppendRow(b, &rs[i])
	}
	return string(b)
}

// A refusal's Retry-After comes from the same rule as the gate's wait:
// with the seat's breaker open (cooldown 1 s) after a 429 asking 5 s, the
// job's next request is refused "breaker open" with Retry-After: 5, the
// rest of the wait its last failure asked, not the shorter cooldown.
func TestRefusalRetryAfterIsTheRetryRulesWait(t *testing.T) {
	pol := testPolicy()
	pol.Budget.Deadline = 45 * time.Second
	pol.Breaker = admit.BreakerConfig{Window: 30 * time.Second, FailureRate: 0.5, MinRequests: 1, Cooldown: time.Second, HalfOpenProbes: 1}
	base, srv := upstreamAt(t, seatserver.OpenAI, seat.Plan{Status: 429, Elapsed: 2 * ms, RetryAfter: 5 * time.Second, HasRetryAfter: true})
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
	resp, _ := post(t, px.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "ra")
	require.Equal(t, 429, resp.StatusCode)
	resp, body := post(t, px.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "ra")
	assert.Equal(t, 503, resp.StatusCode)
	assert.Contains(t, body, "refuse: breaker open")
	assert.Equal(t, "5", resp.Header.Get("Retry-After"))
	assert.Equal(t, 1, srv.Total())
	px.stop()
	assertReplaysUnchanged(t, pol, px.rows.all())
}
