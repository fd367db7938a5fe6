package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

const ms = time.Millisecond

const plantedKey = "sk-planted-SECRET-7f3c9a1e4b"

type plans []seat.Plan

func (p plans) PlanFor(n int) seat.Plan {
	if n < len(p) {
		return p[n]
	}
	return p[len(p)-1]
}

// fixedNow is a seat server's clock, so two servers answer the same bytes.
func fixedNow() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }

// upstreamAt starts a seat server playing ps in format f on 127.0.0.1;
// it stops with the test.
func upstreamAt(t testing.TB, f seatserver.Format, ps ...seat.Plan) (base string, srv *seatserver.Server) {
	t.Helper()
	srv, err := seatserver.New(seatserver.Options{Planner: plans(ps), Format: f, Now: fixedNow})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return f.BaseURL(ln.Addr()), srv
}

// clock is a wall clock a test moves by hand: the deadline and the rows'
// ts read it; attempts still take real (small) time.
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

type rows struct {
	mu sync.Mutex
	r  []ledgerfile.Row
}

func (r *rows) add(rs []ledgerfile.Row) error {
	r.mu.Lock()
	r.r = append(r.r, rs...)
	r.mu.Unlock()
	return nil
}

func (r *rows) all() []ledgerfile.Row {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ledgerfile.Row(nil), r.r...)
}

// text is the rows as the log holds them.
func (r *rows) text() string {
	var b strings.Builder
	for _, row := range r.all() {
		b.WriteString(ledgerfile.FormatRow(&row))
		b.WriteByte('\n')
	}
	return b.String()
}

type running struct {
	url   string // the proxy's origin
	rows  *rows
	clock *clock
	px    *Proxy
	stop  func()
}

func testPolicy() rehearse.Policy {
	p := rehearse.DefaultPolicy()
	p.Budget = admit.Budget{Deadline: 10 * time.Second, TokenCeiling: 100_000, MaxAttempts: 2, MaxWait: 5 * time.Second}
	p.Timeouts = rehearse.Timeouts{Soft: 0, Hard: 5 * time.Second}
	// The proxy waits a retry's backoff itself: short ones keep tests short.
	p.Retry.BaseDelay, p.Retry.MaxDelay = 10*ms, 50*ms
	return p
}

// start runs a proxy in front of chain on 127.0.0.1; it drains with the test.
func start(t testing.TB, pol rehearse.Policy, chain []seat.Config, tweak ...func(*Options)) *running {
	t.Helper()
	return startOn(t, nil, pol, chain, tweak...)
}

// startOn is start on ln (nil: a new listener on 127.0.0.1).
func startOn(t testing.TB, ln net.Listener, pol rehearse.Policy, chain []seat.Config, tweak ...func(*Options)) *running {
	t.Helper()
	rs, c := &rows{}, &clock{}
	o := Options{Policy: pol, Chain: chain, Sink: rs.add, Now: c.Now, Run: 7,
		Getenv: func(k string) string {
			if k == "SEAT_KEY" {
				return "sk-seat-own-KEY-123456"
			}
			return ""
		}}
	for _, f := range tweak {
		f(&o)
	}
	// ownSink: the rows go to rs, which takes every one (a test that
	// fails writes brings a sink of its own).
	ownSink := reflect.ValueOf(o.Sink).Pointer() == reflect.ValueOf(rs.add).Pointer()
	px, err := New(o)
	require.NoError(t, err)
	if ln == nil {
		ln = listen(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = px.Serve(ctx, ln, io.Discard); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(func() {
		stop()
		if ownSink && !t.Failed() {
			// Every proxy test: the rows the proxy counts written are the
			// rows the log got, none held or lost (issue 36).
			assert.Equal(t, LogCounts{Written: int64(len(rs.all())), InLease: px.Rows().InLease}, px.Rows(), "the proxy's row counts against its log")
		}
	})
	return &running{url: "http://" + ln.Addr().String(), rows: rs, clock: c, px: px, stop: stop}
}

func seatCfg(name, kind, base string) seat.Config {
	return seat.Config{Name: name, Kind: kind, BaseURL: base, Model: "m-" + name}
}

// post sends body to the proxy's path with headers (k, v pairs).
func post(t testing.TB, url, body string, kv ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var okPlan = seat.Plan{TTFB: 5 * ms, Wait: 10 * ms, Elapsed: 30 * ms, PromptTokens: 12, CompletionTokens: 8}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

// wait returns the rows once there are n: a row is written just after
// the answer's last byte, so a client can be done a moment before it.
func (r *rows) wait(t testing.TB, n int) []ledgerfile.Row {
	t.Helper()
	require.Eventually(t, func() bool { return len(r.all()) >= n }, 5*time.Second, time.Millisecond, "want %d rows", n)
	return r.all()
}

// breaker is the breaker of seat s sending model.
func (p *Proxy) breaker(s int, model string) *admit.Breaker {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deployment(s, model).br
}

// done returns job's rows once the proxy is quiet: no request in flight
// and every row it queued written (a row is written just after the
// answer, so a client can be done a moment before it).
func (r *running) done(t testing.TB, job string) []ledgerfile.Row {
	t.Helper()
	q := r.px.q
	require.Eventually(t, func() bool {
		q.mu.Lock()
		idle := len(q.pending) == 0 && q.waiting
		q.mu.Unlock()
		return len(r.px.sem) == 0 && idle
	}, 5*time.Second, time.Millisecond, "the proxy quiet")
	var out []ledgerfile.Row
	for _, row := range r.rows.all() {
		if row.Job == job {
			out = append(out, row)
		}
	}
	return out
}
