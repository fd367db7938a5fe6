package seat

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/realtime"
)

// TestConnectionsKeptAlive (issue 11): attempts reuse one connection by
// default, and only the attempt that made it records a connect time; a
// cold seat opens (and records) one per attempt.
func TestConnectionsKeptAlive(t *testing.T) {
	for _, cold := range []bool{false, true} {
		name := "warm"
		if cold {
			name = "cold"
		}
		t.Run(name, func(t *testing.T) {
			var conns atomic.Int32
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			srv := &httptest.Server{Listener: ln, Config: &http.Server{
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					sw := startStream(w, "text/event-stream")
					sw.data(oaText("hi"))
					sw.data(oaUsage(3, 1))
					sw.raw("data: [DONE]\n\n")
				}),
				ConnState: func(_ net.Conn, st http.ConnState) {
					if st == http.StateNew {
						conns.Add(1)
					}
				},
			}}
			srv.Start()
			t.Cleanup(srv.Close)
			s := newTestSeat(t, "openai", srv.URL, func(c *Config) { c.Cold = cold })
			for i := 0; i < 3; i++ {
				obs := do(t, s, 2*time.Second, Request{})
				require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
				if cold || i == 0 {
					assert.True(t, obs.HasConnect, "attempt %d made a connection", i)
					assert.Positive(t, obs.Connect)
					assert.LessOrEqual(t, obs.Connect, obs.TTFB)
				} else {
					assert.False(t, obs.HasConnect, "attempt %d reused one", i)
				}
			}
			want := int32(1)
			if cold {
				want = 3
			}
			assert.Equal(t, want, conns.Load(), "connections opened")
		})
	}
}

// TestStaleKeptAliveConnection: a server that closed the idle connection
// between attempts costs the next attempt nothing: nothing was written,
// so it goes out on a new connection.
func TestStaleKeptAliveConnection(t *testing.T) {
	var conns atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var last atomic.Pointer[net.Conn]
	var closed atomic.Bool
	srv := &httptest.Server{Listener: ln, Config: &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sw := startStream(w, "text/event-stream")
			sw.data(oaText("hi"))
			sw.raw("data: [DONE]\n\n")
		}),
		ConnState: func(c net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				conns.Add(1)
			case http.StateIdle:
				last.Store(&c)
			case http.StateClosed:
				closed.Store(true)
			}
		},
	}}
	srv.Start()
	t.Cleanup(srv.Close)
	s := newTestSeat(t, "openai", srv.URL)
	require.Equal(t, admit.OK, do(t, s, 2*time.Second, Request{}).Outcome)
	require.Eventually(t, func() bool { return last.Load() != nil }, time.Second, 5*time.Millisecond)
	// The server drops the idle connection: its FIN goes out, its read
	// side stays open, so the server sees the moment the client, having
	// read the FIN, closes its end (StateClosed). Awaited, not slept for.
	require.NoError(t, (*last.Load()).(*net.TCPConn).CloseWrite())
	require.Eventually(t, closed.Load, realtime.Hang(), time.Millisecond, "the client never closed the dropped connection")
	obs := do(t, s, 2*time.Second, Request{})
	assert.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.Equal(t, int32(2), conns.Load())
}

// countingConn counts the writes made on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int32
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestOneWritePerAttempt (issue 11): an attempt's request, headers and
// body, leaves in one write on a kept-alive connection, as the server
// sees it: the method, path, idempotency key, headers and the body.
func TestOneWritePerAttempt(t *testing.T) {
	type seen struct {
		method, path, idem, ctype, agent, auth, body string
		length                                       int64
	}
	got := make(chan seen, 4)
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.RequestURI(), r.Header.Get("Idempotency-Key"), r.Header.Get("Content-Type"),
			r.Header.Get("User-Agent"), r.Header.Get("Authorization"), string(b), r.ContentLength}
		sw := startStream(w, "text/event-stream")
		sw.data(oaText("hi"))
		sw.data(oaUsage(3, 1))
		sw.raw("data: [DONE]\n\n")
	}))
	s := newTestSeat(t, "openai", srv.URL, func(c *Config) { c.BaseURL = srv.URL + "/base/v1?tenant=a" })
	var writes atomic.Int32
	tr := s.(*httpSeat).rt.(*http.Transport)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	for i, key := range []string{"job-1", "job-2", ""} {
		writes.Store(0)
		obs := do(t, s, 2*time.Second, Request{IdempotencyKey: key})
		require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
		assert.Equal(t, int32(1), writes.Load(), "attempt %d: writes", i)
		r := <-got
		assert.Equal(t, "POST", r.method)
		assert.Equal(t, "/base/v1/chat/completions?tenant=a", r.path)
		assert.Equal(t, key, r.idem)
		assert.Equal(t, "application/json", r.ctype)
		assert.Equal(t, "retrygate", r.agent)
		assert.Equal(t, "Bearer "+testEnv(testKeyEnv), r.auth)
		assert.Contains(t, r.body, `"Say hello in five words."`)
		assert.Equal(t, int64(len(r.body)), r.length)
	}
}
