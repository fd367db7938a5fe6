package seatserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/rehearse/seat"
)

// plans is a planner that plays its plans in order and then repeats the last.
type plans []seat.Plan

func (p plans) PlanFor(n int) seat.Plan {
	if n >= len(p) {
		n = len(p) - 1
	}
	return p[n]
}

// syncBuffer is a bytes.Buffer safe for the server's handler goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running is a seat server on 127.0.0.1 for one test.
type running struct {
	srv    *Server
	addr   net.Addr
	origin string // http://127.0.0.1:port
	log    *syncBuffer
}

func (r *running) baseURL(f Format) string { return f.BaseURL(r.addr) }

// serve starts a server playing ps in format f; it stops with the test.
func serve(t testing.TB, f Format, ps ...seat.Plan) *running {
	t.Helper()
	srv, err := New(Options{Planner: plans(ps), Format: f})
	require.NoError(t, err)
	return serveWith(t, srv)
}

// serveWith starts srv on 127.0.0.1; it stops with the test. Its log is
// replaced by a buffer the test can read.
func serveWith(t testing.TB, srv *Server) *running {
	t.Helper()
	log := &syncBuffer{}
	srv.log.SetOutput(log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Error("seat server did not stop within 5s")
		}
	})
	return &running{srv: srv, addr: ln.Addr(), origin: "http://" + ln.Addr().String(), log: log}
}

// requests reads /_retrygate/requests over HTTP, as a user would.
func (r *running) requests(t testing.TB) RequestsResponse {
	t.Helper()
	resp, err := http.Get(r.origin + RequestsPath)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out RequestsResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

// awaitState polls /_retrygate/requests until request index reaches state
// or within has passed since from; it returns the record and when the
// state was first seen. The loop is bounded by the deadline, not a sleep.
func (r *running) awaitState(t *testing.T, index int, state string, from time.Time, within time.Duration) (Record, time.Time) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		rs := r.requests(t).Requests
		if index < len(rs) && rs[index].State == state {
			return rs[index], time.Now()
		}
		if time.Since(from) > within {
			got := "no such request"
			if index < len(rs) {
				got = rs[index].State
			}
			t.Fatalf("request %d: not %s within %s of the client giving up (state %s)", index, state, within, got)
		}
		<-tick.C
	}
}

const ms = time.Millisecond

var okPlan = seat.Plan{TTFB: 20 * ms, Wait: 50 * ms, Elapsed: 150 * ms, PromptTokens: 42, CompletionTokens: 30}

// plantedKey and prompt are canaries: neither may appear in any output.
const plantedKey = "sk-planted-SECRET-7f3c9a1e4b"

const prompt = "PROMPT-CANARY: summarize the quarterly report"
