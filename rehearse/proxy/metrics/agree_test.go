package metrics_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore/pgtest"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/proxy"
	"github.com/retrygate/retrygate/rehearse/proxy/metrics"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

const ms = time.Millisecond

type plans []seat.Plan

func (p plans) PlanFor(n int) seat.Plan {
	if n < len(p) {
		return p[n]
	}
	return p[len(p)-1]
}

var (
	okPlan   = seat.Plan{TTFB: 2 * ms, Wait: 5 * ms, Elapsed: 15 * ms, PromptTokens: 12, CompletionTokens: 8}
	fail500  = seat.Plan{Status: 500, Elapsed: 5 * ms}
	limit429 = seat.Plan{Status: 429, Elapsed: 5 * ms}
	bad400   = seat.Plan{Status: 400, Elapsed: 5 * ms, ErrorCode: "invalid_request_error"}
	hang     = seat.Plan{Hang: true}
)

// upstream serves ps in the OpenAI format on 127.0.0.1 until the test ends.
func upstream(t *testing.T, ps ...seat.Plan) string {
	t.Helper()
	srv, err := seatserver.New(seatserver.Options{Planner: plans(ps), Format: seatserver.OpenAI})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return seatserver.OpenAI.BaseURL(ln.Addr())
}

// clock is the proxy's wall clock, moved by hand past the breaker's
// window and cooldown; attempts still take real (small) time.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// logTo is where a test proxy logs: a file, or a PostgreSQL log whose
// database also keeps the named jobs' books (their rows are stored with
// the books, not through the sink).
type logTo struct {
	sink   func([]ledgerfile.Row) error
	books  store.Books
	event  func(*ledgerfile.Event) error
	flush  func() error
	report func(t *testing.T) *summary.Summary // report's summary of the log, events included
}

func fileLog(t *testing.T, _ *clock) logTo {
	path := filepath.Join(t.TempDir(), "rehearsal.log")
	w := ledgerfile.NewWriter(path, false)
	t.Cleanup(func() { _ = w.Close() })
	return logTo{
		sink:  func(rs []ledgerfile.Row) error { return w.Append(rs...) },
		event: w.Event, flush: w.Flush,
		report: func(t *testing.T) *summary.Summary {
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			s := summary.New(summary.Options{})
			_, _, err = summary.ScanEvents(f, path, false, func(r *ledgerfile.Row) { s.Add(r, path) }, s.AddEvent, nil)
			require.NoError(t, err)
			return s.Close()
		},
	}
}

func pgLog(t *testing.T, c *clock) logTo {
	ctx := context.Background()
	u := pgtest.DB(t)
	_, err := pgstore.Init(ctx, u)
	require.NoError(t, err)
	st, err := pgstore.Open(ctx, u, pgstore.Options{Now: c.Now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return logTo{
		sink: func(rs []ledgerfile.Row) error { return st.Append(ctx, rs...) }, books: st,
		event: func(ev *ledgerfile.Event) error {
			line, err := ledgerfile.FormatEvent(ev)
			if err != nil {
				return err
			}
			return st.CommentLocked(ctx, func([]string) (string, error) { return strings.TrimPrefix(line, "# "), nil })
		},
		flush: func() error { return nil },
		report: func(t *testing.T) *summary.Summary {
			s := summary.New(summary.Options{})
			require.NoError(t, st.Scan(ctx, func(e store.Entry) error {
				if e.Row != nil {
					s.Add(e.Row, st.Name())
				} else if ev, err := ledgerfile.ParseEvent([]byte(e.Comment)); err == nil {
					s.AddEvent(&ev)
				}
				return nil
			}))
			return s.Close()
		},
	}
}

// running is a proxy with metrics in front of a seat and its fallback,
// wired as `retrygate proxy --metrics` wires it.
type running struct {
	url, metrics string
	log          logTo
	clock        *clock
	m            *metrics.Metrics
	stop         func()
}

func start(t *testing.T, pol rehearse.Policy, chain []seat.Config, to func(*testing.T, *clock) logTo) *running {
	t.Helper()
	c := &clock{}
	lg := to(t, c)
	m := metrics.New(metrics.Options{Chain: chain, SlowAfter: pol.Retry.SlowServerAfter})
	px, err := proxy.New(proxy.Options{
		Policy: pol, Chain: chain, Now: c.Now, Getenv: func(string) string { return "" },
		Sink: m.Sink(lg.sink), Books: m.Books(lg.books),
		OnBreaker: func(name, _ string, at time.Time, from, to admit.BreakerState) {
			rehearse.BreakerEvents(name, func(ev *ledgerfile.Event) { require.NoError(t, lg.event(ev)) })(at, from, to)
			m.Breaker(name, at, from, to)
		},
	})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	msrv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = msrv.Serve(mln) }()
	t.Cleanup(func() { _ = msrv.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = px.Serve(ctx, ln, io.Discard); close(done) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			require.NoError(t, lg.flush())
		})
	}
	t.Cleanup(stop)
	return &running{url: "http://" + ln.Addr().String(), metrics: "http://" + mln.Addr().String(), log: lg, clock: c, m: m, stop: stop}
}

// chat sends one chat request of job (none: a job of its own).
func (r *running) chat(t *testing.T, job, model string) int {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model)
	req, err := http.NewRequest(http.MethodPost, r.url+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if job != "" {
		req.Header.Set("X-Retrygate-Job", job)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// gather parses m's exposition with expfmt.
func gather(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(m.Exposition()))
	require.NoError(t, err)
	return fams
}

// scrape parses the endpoint's Prometheus text with expfmt.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// sum adds the family's counter or gauge values, or its histograms'
// sums (or counts), over the series whose labels match want.
func sum(fams map[string]*dto.MetricFamily, name string, want map[string]string, count bool) float64 {
	total := 0.0
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.GetMetric() {
		got := labels(m)
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil && count:
			total += float64(m.GetHistogram().GetSampleCount())
		case m.Histogram != nil:
			total += m.GetHistogram().GetSampleSum()
		}
	}
	return total
}

func agreePolicy() rehearse.Policy {
	p := rehearse.DefaultPolicy()
	p.Budget = admit.Budget{Deadline: 10 * time.Second, TokenCeiling: 100_000, MaxAttempts: 3, MaxWait: 5 * time.Second}
	p.Timeouts = rehearse.Timeouts{Hard: time.Second}  // the hang's timeout; an answer under load stays well within it
	p.Retry.BaseDelay, p.Retry.MaxDelay = 10*ms, 50*ms // the proxy waits a retry's backoff itself
	p.Breaker = admit.BreakerConfig{Window: 10 * time.Second, FailureRate: 0.75, MinRequests: 4, Cooldown: 5 * time.Second, HalfOpenProbes: 1}
	return p
}

// TestMetricsAgreeWithReport runs the proxy in front of a seat that
// answers ok, 429, 500, 400 and hangs (a timeout, retried on the
// fallback), with refusals and a breaker that opens and closes, then
// compares every count, sum and bucket a scrape shows with the summary
// report computes from the log it wrote: a file, or a PostgreSQL log
// (whose named jobs' rows are stored with their shared books).
func TestMetricsAgreeWithReport(t *testing.T) {
	t.Run("file", func(t *testing.T) { agree(t, fileLog) })
	t.Run("postgres", func(t *testing.T) { agree(t, pgLog) })
}

func agree(t *testing.T, to func(*testing.T, *clock) logTo) {
	up := upstream(t,
		fail500, okPlan, // j1: a 5xx, then the answer
		limit429, okPlan, // j2: a 429, then the answer
		hang,                   // j3: a timeout; its retry goes to the fallback
		okPlan, okPlan, okPlan, // j4: three answers; the fourth request is over the cap
		bad400,                                                                 // j5: a client error; its retry is refused
		okPlan, okPlan, okPlan, okPlan, okPlan, okPlan, okPlan, okPlan, okPlan, // unnamed jobs
		fail500, fail500, fail500, fail500, // the breaker opens
		okPlan) // the half-open probe closes it
	fb := upstream(t, okPlan)
	chain := []seat.Config{
		{Name: "up", Kind: "openai", BaseURL: up, Model: "m-up", PriceIn: 1, PriceOut: 2},
		{Name: "fb", Kind: "openai", BaseURL: fb, Model: "m-fb", PriceIn: 3, PriceOut: 4},
	}
	r := start(t, agreePolicy(), chain, to)

	// The proxy runs the policy's loop inside each request: a failure it
	// retries is one more attempt (and row) of the same request.
	assert.Equal(t, 200, r.chat(t, "j1", "m-up")) // a 5xx, then the answer
	assert.Equal(t, 200, r.chat(t, "j2", "m-up")) // a 429, then the answer
	assert.Equal(t, 200, r.chat(t, "j3", "m-up")) // a timeout, then the fallback
	for range 3 {
		assert.Equal(t, 200, r.chat(t, "j4", "m-up"))
	}
	assert.Equal(t, 503, r.chat(t, "j4", "m-up")) // attempt cap
	assert.Equal(t, 400, r.chat(t, "j5", "m-up")) // the provider's client error, not retried
	assert.Equal(t, 503, r.chat(t, "j5", "m-up")) // permanent error
	for i := range 9 {
		assert.Equal(t, 200, r.chat(t, "", fmt.Sprintf("m-%d", i%3)))
	}
	r.clock.Advance(time.Minute) // the breaker's window holds only what follows
	for range 2 {
		// Two 5xx each (the breaker opens at the fourth), then the fallback.
		assert.Equal(t, 200, r.chat(t, "", "m-up"))
	}
	assert.Equal(t, 200, r.chat(t, "", "m-up")) // up's breaker is open: the fallback answers
	r.clock.Advance(6 * time.Second)            // past the cooldown: half-open
	assert.Equal(t, 200, r.chat(t, "", "m-up")) // the probe, which closes it
	r.stop()
	fams := scrape(t, r.metrics)
	s := r.log.report(t)

	// The run was the mix it says: each kind of row is there.
	require.NotNil(t, s.All)
	for _, o := range []string{"ok", "server_error", "rate_limited", "client_error", "timeout"} {
		require.Positive(t, s.All.Outcomes[o], "outcome %s", o)
	}
	require.Positive(t, s.All.Refusals["attempt cap"])
	require.Positive(t, s.All.Refusals["permanent error"])
	require.Positive(t, s.All.FallbackJobs)
	require.Positive(t, float64(s.All.RetryTax.USD))
	require.NotEmpty(t, s.Breaker)

	assert.Equal(t, float64(s.Rows), sum(fams, "retrygate_log_rows_total", nil, false), "rows")
	assert.Equal(t, float64(s.All.Attempts), sum(fams, "retrygate_decisions_total", map[string]string{"decision": "admit"}, false), "admitted")
	assert.Equal(t, float64(s.All.Refused), sum(fams, "retrygate_decisions_total", map[string]string{"decision": "refuse"}, false), "refused")
	for reason, n := range s.All.Refusals {
		assert.Equal(t, float64(n), sum(fams, "retrygate_decisions_total", map[string]string{"decision": "refuse", "reason": reason}, false), "refusals: %s", reason)
	}
	jobsSent := s.Jobs.Time.Len() // jobs that sent at least once
	assert.Equal(t, float64(s.All.Attempts-jobsSent), sum(fams, "retrygate_retries_total", nil, false), "retries")
	assert.Equal(t, float64(s.All.FallbackJobs), sum(fams, "retrygate_fallback_activations_total", nil, false), "fallback jobs")
	assert.Equal(t, float64(s.All.TokensTotal),
		sum(fams, "gen_ai_client_token_usage", map[string]string{"gen_ai_token_type": "input"}, false)+
			sum(fams, "gen_ai_client_token_usage", map[string]string{"gen_ai_token_type": "output"}, false), "tokens")
	assert.Equal(t, float64(s.Content.Wait.Len()), sum(fams, "gen_ai_client_operation_time_to_first_chunk_seconds", nil, true), "answers with a first chunk")
	assert.InDelta(t, s.Content.Wait.Mean()*float64(s.Content.Wait.Len()), sum(fams, "gen_ai_client_operation_time_to_first_chunk_seconds", nil, false), 1e-9, "Σ wait of answers")

	for _, g := range s.Groups {
		seatL := map[string]string{"seat": g.Key}
		for o, n := range g.Outcomes {
			assert.Equal(t, float64(n), sum(fams, "retrygate_attempts_total", map[string]string{"seat": g.Key, "outcome": o}, false), "%s %s", g.Key, o)
		}
		billed := sum(fams, "retrygate_attempts_total", map[string]string{"seat": g.Key, "billing": "billable"}, false) +
			sum(fams, "retrygate_attempts_total", map[string]string{"seat": g.Key, "billing": "ambiguous"}, false)
		assert.Equal(t, float64(g.Billed), billed, "%s billed", g.Key)
		assert.InDelta(t, float64(g.USDTotal), sum(fams, "retrygate_cost_usd_total", seatL, false), 1e-12, "%s cost", g.Key)
		assert.InDelta(t, float64(g.RetryTax.USD), sum(fams, "retrygate_retry_tax_usd_total", seatL, false), 1e-12, "%s retry tax", g.Key)
		assert.Equal(t, float64(g.RetryTax.Tokens), sum(fams, "retrygate_retry_tax_tokens_total", seatL, false), "%s retry tax tokens", g.Key)
		assert.Equal(t, float64(g.Elapsed.N), sum(fams, "gen_ai_client_operation_duration_seconds", seatL, true), "%s attempts timed", g.Key)
		elapsed := 0.0
		g.Elapsed.Values.Each(func(v float64, n int64) { elapsed += v * float64(n) })
		assert.InDelta(t, elapsed, sum(fams, "gen_ai_client_operation_duration_seconds", seatL, false), 1e-9, "%s Σ elapsed", g.Key)
		assertBuckets(t, fams, g)
	}

	// The breaker: every span report draws opened once and, here, closed.
	assert.Equal(t, float64(len(s.Breaker)), sum(fams, "retrygate_breaker_transitions_total", map[string]string{"seat": "up", "to": "open"}, false))
	assert.Equal(t, float64(len(s.Breaker)), sum(fams, "retrygate_breaker_transitions_total", map[string]string{"seat": "up", "from": "half-open", "to": "closed"}, false))
	assert.Equal(t, 1.0, sum(fams, "retrygate_breaker_state", map[string]string{"seat": "up", "state": "closed"}, false))
	assert.Equal(t, 0.0, sum(fams, "retrygate_breaker_state", map[string]string{"seat": "up", "state": "open"}, false))
}

// assertBuckets checks each bucket of the seat's duration histogram
// against the elapsed times report counts: the attempts at or under it.
func assertBuckets(t *testing.T, fams map[string]*dto.MetricFamily, g *summary.Group) {
	t.Helper()
	cum := map[float64]uint64{}
	for _, m := range fams["gen_ai_client_operation_duration_seconds"].GetMetric() {
		if labels(m)["seat"] != g.Key {
			continue
		}
		for _, b := range m.GetHistogram().GetBucket() {
			cum[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	require.NotEmpty(t, cum)
	for le, got := range cum {
		want := uint64(0)
		g.Elapsed.Values.Each(func(v float64, n int64) {
			if v <= le {
				want += uint64(n)
			}
		})
		assert.Equal(t, want, got, "%s le=%g", g.Key, le)
	}
}

// TestMetricsSeriesBounded sends rows of many jobs and many models: the
// series a scrape shows stop growing once every label value is seen,
// whatever the number of jobs (no job id is a label) and of models a
// client names (past a bound they count as _OTHER).
func TestMetricsSeriesBounded(t *testing.T) {
	chain := []seat.Config{{Name: "up", Kind: "openai", Model: "m", PriceIn: 1, PriceOut: 1}}
	m := metrics.New(metrics.Options{Chain: chain})
	sink := m.Sink(func([]ledgerfile.Row) error { return nil })
	outcomes := []admit.Outcome{admit.OK, admit.ServerError, admit.RateLimited, admit.Timeout}
	series := func() int {
		n := 0
		for _, f := range gather(t, m) {
			if strings.HasPrefix(f.GetName(), "retrygate_") || strings.HasPrefix(f.GetName(), "gen_ai_") {
				n += len(f.GetMetric())
			}
		}
		return n
	}
	send := func(from, to int) {
		var rows []ledgerfile.Row
		for i := from; i < to; i++ {
			o := outcomes[i%len(outcomes)]
			rows = append(rows, ledgerfile.Row{
				TS: time.Unix(int64(i), 0), Job: fmt.Sprintf("job-%d", i), Attempt: 1 + i%3, Seat: "up",
				Model: fmt.Sprintf("client-model-%d", i), Elapsed: time.Duration(i%50) * ms, Wait: ms,
				Tokens: 20, PromptTokens: 12, CompletionTokens: 8, HasSplit: true, TokensFrom: "usage",
				Outcome: o, Billing: admit.BillingOf(o, 0, 0), CostUSD: 0.001, HasCost: true,
				HasSpent: true, Used: i % 3, Decision: "admit", Fallback: i%7 == 0,
			}, ledgerfile.Row{
				TS: time.Unix(int64(i), 0), Job: fmt.Sprintf("job-%d", i), Attempt: 4, Seat: "up",
				Model: fmt.Sprintf("client-model-%d", i), Decision: "refuse: attempt cap", Unsent: true,
			})
		}
		require.NoError(t, sink(rows))
	}
	send(0, 1000)
	after1k := series()
	send(1000, 20_000)
	assert.Equal(t, after1k, series(), "series grew with jobs")
	assert.Less(t, after1k, 2000, "series")

	models := map[string]bool{}
	for _, f := range gather(t, m) {
		for _, x := range f.GetMetric() {
			for _, l := range x.GetLabel() {
				assert.NotContains(t, l.GetValue(), "job-", "%s: a job id as a label", f.GetName())
				if l.GetName() == "gen_ai_request_model" {
					models[l.GetValue()] = true
				}
			}
		}
	}
	assert.True(t, models[metrics.Other], "models past the bound count as _OTHER")
	assert.True(t, models["client-model-0"], "the first models keep their names")
	assert.LessOrEqual(t, len(models), 33)
}
