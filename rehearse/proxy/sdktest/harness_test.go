package sdktest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/proxy"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

const ms = time.Millisecond

const plantedKey = "sk-planted-SECRET-7f3c9a1e4b"

const prompt = "PROMPT-CANARY: summarize the quarterly report"

type plans []seat.Plan

func (p plans) PlanFor(n int) seat.Plan {
	if n < len(p) {
		return p[n]
	}
	return p[len(p)-1]
}

var okPlan = seat.Plan{TTFB: 5 * ms, Wait: 20 * ms, Elapsed: 60 * ms, PromptTokens: 42, CompletionTokens: 30}

// upstream starts a seat server playing ps in format f on 127.0.0.1,
// answering on a fixed clock so two servers send the same bytes.
func upstream(t *testing.T, f seatserver.Format, ps ...seat.Plan) (origin string, srv *seatserver.Server) {
	t.Helper()
	srv, err := seatserver.New(seatserver.Options{Planner: plans(ps), Format: f,
		Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String(), srv
}

type rowLog struct {
	mu   sync.Mutex
	rows []ledgerfile.Row
	text bytes.Buffer
}

func (l *rowLog) add(rs []ledgerfile.Row) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range rs {
		l.rows = append(l.rows, rs[i])
		l.text.WriteString(ledgerfile.FormatRow(&rs[i]) + "\n")
	}
	return nil
}

// wait returns the rows once there are n (a row is written just after
// the answer's last byte).
func (l *rowLog) wait(t *testing.T, n int) []ledgerfile.Row {
	t.Helper()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.rows) >= n
	}, 5*time.Second, time.Millisecond, "want %d rows", n)
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ledgerfile.Row(nil), l.rows...)
}

func (l *rowLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

func policy() rehearse.Policy {
	p := rehearse.DefaultPolicy()
	p.Budget = admit.Budget{Deadline: 20 * time.Second, TokenCeiling: 100_000, MaxAttempts: 2, MaxWait: 5 * time.Second}
	p.Timeouts = rehearse.Timeouts{Hard: 5 * time.Second}
	return p
}

// front runs retrygate proxy in front of the seat at origin; it returns
// the proxy's origin and the rows it writes.
func front(t *testing.T, kind, origin string, pol rehearse.Policy) (string, *rowLog) {
	t.Helper()
	base := origin + "/v1"
	if kind == "ollama" {
		base = origin
	}
	log := &rowLog{}
	px, err := proxy.New(proxy.Options{
		Policy: pol, Run: 1, Sink: log.add,
		Chain: []seat.Config{{Name: "scratch", Kind: kind, BaseURL: base, Model: "gpt-4o-mini"}},
	})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = px.Serve(ctx, ln, io.Discard); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String(), log
}

// recorder is an http.Client transport that keeps every response body
// the SDK read, byte for byte.
type recorder struct {
	mu     sync.Mutex
	bodies []*bytes.Buffer
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b := &bytes.Buffer{}
	r.mu.Lock()
	r.bodies = append(r.bodies, b)
	r.mu.Unlock()
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, b), resp.Body}
	return resp, nil
}

func (r *recorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bodies[len(r.bodies)-1].String()
}
