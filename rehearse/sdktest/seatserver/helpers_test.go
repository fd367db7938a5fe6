package seatserver_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/rehearse/seat"
	. "github.com/retrygate/retrygate/rehearse/seatserver"
)

const ms = time.Millisecond

var okPlan = seat.Plan{TTFB: 20 * ms, Wait: 50 * ms, Elapsed: 150 * ms, PromptTokens: 42, CompletionTokens: 30}

// plans plays its plans in order and then repeats the last.
type plans []seat.Plan

func (p plans) PlanFor(n int) seat.Plan {
	if n >= len(p) {
		n = len(p) - 1
	}
	return p[n]
}

// running is a seat server on 127.0.0.1 for one test.
type running struct {
	addr   net.Addr
	origin string // http://127.0.0.1:port
}

func (r *running) baseURL(f Format) string { return f.BaseURL(r.addr) }

// serve starts a server playing ps in format f, through the package's
// exported API only; it stops with the test.
func serve(t testing.TB, f Format, ps ...seat.Plan) *running {
	t.Helper()
	srv, err := New(Options{Planner: plans(ps), Format: f})
	require.NoError(t, err)
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
	return &running{addr: ln.Addr(), origin: "http://" + ln.Addr().String()}
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

var filler = Filler

// decodeNDJSON reads every line of an NDJSON body as a JSON object.
func decodeNDJSON(t *testing.T, resp *http.Response) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(resp.Body)
	for dec.More() {
		var m map[string]any
		require.NoError(t, dec.Decode(&m))
		out = append(out, m)
	}
	return out
}

// awaitState polls /_retrygate/requests until request index reaches state
// or within has passed since from; it returns the record and when the
// state was first seen. The loop is bounded by the deadline.
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
			t.Fatalf("request %d: not %s within %s", index, state, within)
		}
		<-tick.C
	}
}
