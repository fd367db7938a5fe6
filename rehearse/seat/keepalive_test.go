package seat

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"retrygate/admit"
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
			}
		},
	}}
	srv.Start()
	t.Cleanup(srv.Close)
	s := newTestSeat(t, "openai", srv.URL)
	require.Equal(t, admit.OK, do(t, s, 2*time.Second, Request{}).Outcome)
	require.Eventually(t, func() bool { return last.Load() != nil }, time.Second, 5*time.Millisecond)
	(*last.Load()).Close()            // the server drops the idle connection
	time.Sleep(20 * time.Millisecond) // let the FIN arrive: the server's pace
	obs := do(t, s, 2*time.Second, Request{})
	assert.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.Equal(t, int32(2), conns.Load())
}
