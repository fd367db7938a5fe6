package seat

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/realtime"
)

// rawServer accepts TCP connections on 127.0.0.1 and hands each, with
// its request already read, to h: for servers net/http would not write.
func rawServer(t *testing.T, h func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				h(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// memPeak samples the heap while f runs and returns the peak growth.
func memPeak(f func()) uint64 {
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > base.HeapInuse && m.HeapInuse-base.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse - base.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak.Load()
}

// lazyBody writes total bytes made of unit repeated, as fast as the client
// reads, stopping when the client goes away; it never holds more than one
// unit in memory.
func lazyBody(w io.Writer, r *http.Request, unit []byte, total int64) {
	f, _ := w.(http.Flusher)
	for sent := int64(0); sent < total; sent += int64(len(unit)) {
		if r.Context().Err() != nil {
			return
		}
		if _, err := w.Write(unit); err != nil {
			return
		}
		if f != nil && sent%(1<<20) == 0 {
			f.Flush()
		}
	}
}

// TestHostileServers: each ends within the hard timeout plus 100 ms, as
// an observation with the right outcome, never a panic, in bounded memory.
func TestHostileServers(t *testing.T) {
	const hard = time.Second
	// The heap may grow by far less than any of the bodies below.
	const maxHeap = 48 << 20
	// About 4 KiB of content a frame.
	bigContent := data(oaText(strings.Repeat("lorem ipsum ", 340)))

	tests := []struct {
		name    string
		kind    string
		waitCap time.Duration
		// handler or raw: the server
		handler http.HandlerFunc
		raw     func(c net.Conn)
		want    admit.Outcome
		detail  string // a substring of Detail
		check   func(t *testing.T, obs Observation)
	}{
		{
			name: "slowloris headers", kind: "openai",
			raw: func(c net.Conn) {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Slow: ")
				for {
					if _, err := c.Write([]byte("a")); err != nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			},
			want: admit.Timeout,
			check: func(t *testing.T, obs Observation) {
				assert.False(t, obs.HasTTFB, "headers never completed")
				assert.False(t, obs.HasWait)
			},
		},
		{
			name: "accept and never answer", kind: "anthropic",
			raw:  func(c net.Conn) { io.Copy(io.Discard, c) },
			want: admit.Timeout,
		},
		{
			name: "endless stream of content", kind: "openai",
			handler: func(w http.ResponseWriter, r *http.Request) {
				sw := startStream(w, "text/event-stream")
				for r.Context().Err() == nil {
					sw.data(oaText(" more"))
					time.Sleep(5 * time.Millisecond)
				}
			},
			want: admit.Timeout,
			check: func(t *testing.T, obs Observation) {
				assert.True(t, obs.HasWait)
				assert.Positive(t, obs.CompletionTokens)
				assert.Equal(t, FromEstimate, obs.TokensFrom)
			},
		},
		{
			name: "endless keep-alives under a wait cap", kind: "openai", waitCap: 300 * time.Millisecond,
			handler: func(w http.ResponseWriter, r *http.Request) {
				sw := startStream(w, "text/event-stream")
				for r.Context().Err() == nil {
					sw.raw(": keep-alive\n\n")
					sw.data(oaDelta(`{"role":"assistant","content":""}`))
					time.Sleep(10 * time.Millisecond)
				}
			},
			want: admit.WaitCap,
		},
		{
			name: "1 GB body streamed lazily", kind: "openai",
			handler: func(w http.ResponseWriter, r *http.Request) {
				startStream(w, "text/event-stream")
				lazyBody(w, r, []byte(bigContent), 1<<30)
			},
			want: admit.Timeout,
			check: func(t *testing.T, obs Observation) {
				assert.Positive(t, obs.Bytes) // how much: throughput, not asserted here
				assert.True(t, obs.HasWait)
			},
		},
		{
			name: "single 100 MB SSE line", kind: "anthropic",
			handler: func(w http.ResponseWriter, r *http.Request) {
				startStream(w, "text/event-stream")
				io.WriteString(w, "data: ")
				lazyBody(w, r, []byte(strings.Repeat("a", 64<<10)), 100<<20)
				io.WriteString(w, "\n\n")
			},
			want: admit.ServerError, detail: "line over",
		},
		{
			name: "single 100 MB NDJSON line", kind: "ollama",
			handler: func(w http.ResponseWriter, r *http.Request) {
				startStream(w, "application/x-ndjson")
				io.WriteString(w, `{"message":{"content":"`)
				lazyBody(w, r, []byte(strings.Repeat("a", 64<<10)), 100<<20)
				io.WriteString(w, `"}}`+"\n")
			},
			want: admit.ServerError, detail: "line over",
		},
		{
			name: "100 MB of JSON under a 200", kind: "openai",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"choices":[{"message":{"content":"`)
				lazyBody(w, r, []byte(strings.Repeat("a", 64<<10)), 100<<20)
			},
			want: admit.ServerError, detail: "json body over",
		},
		{
			name: "invalid UTF-8 and malformed events tolerated", kind: "openai",
			handler: func(w http.ResponseWriter, r *http.Request) {
				sw := startStream(w, "text/event-stream")
				sw.raw("data: \xff\xfe{{{not json\n\n")
				sw.raw("event: \xc3\x28\ndata: {\"choices\":[{\"delta\":{\"content\":\"caf\xe9 \xff\"}}]}\n\n")
				sw.raw("data: {\"choices\":[{\"delta\":{\"content\":[1,2,{\"text\":\"parts\"}]}}]}\n\n")
				sw.raw("data: {\"choices\":\"nope\"}\n\n")
				sw.raw("retry: 10\nid: \x00\n\n")
				sw.raw("data: [DONE]\n\n")
			},
			want: admit.OK,
			check: func(t *testing.T, obs Observation) {
				assert.True(t, obs.HasWait)
				assert.Positive(t, obs.CompletionTokens)
			},
		},
		{
			name: "malformed events only", kind: "anthropic",
			handler: func(w http.ResponseWriter, r *http.Request) {
				sw := startStream(w, "text/event-stream")
				sw.raw("data: {\n\ndata: ]]\n\nevent: content_block_delta\ndata: \"text\"\n\n")
			},
			want: admit.ServerError, detail: "3 malformed events",
		},
		{
			name: "wrong content type on a 200", kind: "openai",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				lazyBody(w, r, []byte("<html>captive portal</html>"), 1<<30)
			},
			want: admit.ServerError, detail: "unexpected content type text/html",
		},
		{
			name: "text/plain SSE is read anyway", kind: "openai",
			handler: func(w http.ResponseWriter, r *http.Request) {
				sw := startStream(w, "text/plain")
				sw.data(oaText("fine"))
				sw.raw("data: [DONE]\n\n")
			},
			want: admit.OK,
		},
		{
			name: "reset mid-stream (RST)", kind: "openai",
			handler: func(w http.ResponseWriter, r *http.Request) {
				sw := startStream(w, "text/event-stream")
				sw.data(oaText("partial answer"))
				time.Sleep(50 * time.Millisecond)
				c, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				c.(*net.TCPConn).SetLinger(0) // close with RST, not FIN
				c.Close()
			},
			want: admit.Reset,
			check: func(t *testing.T, obs Observation) {
				assert.True(t, obs.HasWait)
				assert.Equal(t, admit.Billable, obs.Billing, "the partial output is billable")
				assert.Positive(t, obs.CompletionTokens)
			},
		},
		{
			name: "connection dropped mid-chunk (FIN)", kind: "ollama",
			raw: func(c net.Conn) {
				line := olText("partial") + "\n"
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(line), line)
				fmt.Fprintf(c, "400\r\n{\"message\":")
				time.Sleep(50 * time.Millisecond)
			},
			want: admit.Reset,
		},
		{
			name: "closed before response headers", kind: "openai",
			raw:  func(c net.Conn) {},
			want: admit.ServerError, detail: "before response headers",
			check: func(t *testing.T, obs Observation) {
				assert.Equal(t, admit.Free, obs.Billing)
			},
		},
		{
			name: "response headers over 64 KiB", kind: "openai",
			raw: func(c net.Conn) {
				io.WriteString(c, "HTTP/1.1 200 OK\r\n")
				for i := 0; i < 200; i++ {
					fmt.Fprintf(c, "X-Pad-%d: %s\r\n", i, strings.Repeat("p", 1000))
				}
				io.WriteString(c, "\r\n")
			},
			want: admit.ServerError, detail: "response headers over 64 KiB",
		},
		{
			name: "101 switching protocols held open", kind: "openai", waitCap: 5 * time.Second,
			raw: func(c net.Conn) {
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
				io.Copy(io.Discard, c)
			},
			want: admit.ServerError, detail: "http 101",
			check: func(t *testing.T, obs Observation) {
				// Held open, it would have run to the hard timeout (and
				// said timeout); the order is the claim, not a clock.
				assert.Less(t, obs.Elapsed, hard, "a protocol switch is refused, not waited out")
			},
		},
		{
			name: "101 switching protocols closed after 3 s", kind: "anthropic",
			raw: func(c net.Conn) {
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
				time.Sleep(3 * time.Second)
			},
			want: admit.ServerError, detail: "http 101",
		},
		{
			name: "endless 1xx", kind: "ollama",
			raw: func(c net.Conn) {
				for {
					if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"); err != nil {
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			},
			want: admit.Timeout, detail: "before response headers",
		},
		{
			name: "204 no content", kind: "openai",
			raw:  func(c net.Conn) { io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n"); io.Copy(io.Discard, c) },
			want: admit.ServerError, detail: "without content",
		},
		{
			name: "302 with a body that never ends", kind: "openai",
			raw: func(c net.Conn) {
				io.WriteString(c, "HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Type: text/html\r\n\r\n")
				for {
					if _, err := c.Write([]byte("<")); err != nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			},
			want: admit.Timeout, detail: "reading an http 302 body",
		},
		{
			name: "500 headers, body never comes, under a wait cap", kind: "anthropic", waitCap: 300 * time.Millisecond,
			raw: func(c net.Conn) {
				io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
				io.Copy(io.Discard, c)
			},
			want: admit.WaitCap,
			check: func(t *testing.T, obs Observation) {
				assert.InDelta(t, 300, ms(obs.Elapsed), 150)
			},
		},
		{
			name: "503 with an endless fast body", kind: "ollama",
			raw: func(c net.Conn) {
				io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\r\n{\"error\":\"")
				chunk := []byte(strings.Repeat("x", 32<<10))
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			},
			want: admit.ServerError, detail: "http 503",
		},
		{
			name: "stream stalls mid-chunk", kind: "openai",
			raw: func(c net.Conn) {
				ev := "data: " + oaText("half") + "\n\n"
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n400\r\ndata: {\"choi", len(ev), ev)
				io.Copy(io.Discard, c)
			},
			want: admit.Timeout, detail: "mid-stream",
			check: func(t *testing.T, obs Observation) {
				assert.True(t, obs.HasWait)
				assert.InDelta(t, ms(hard), ms(obs.Elapsed), 150, "the true elapsed: the hard timeout")
			},
		},
		{
			name: "huge chunk-size line", kind: "ollama",
			raw: func(c net.Conn) {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
				c.Write([]byte(strings.Repeat("f", 1<<20)))
				io.Copy(io.Discard, c)
			},
			want: admit.ServerError, detail: "malformed response body",
		},
		{
			name: "gzip bomb not asked for", kind: "openai",
			raw: func(c net.Conn) {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n\r\n\x1f\x8b\x08\x00")
				io.Copy(io.Discard, c)
			},
			want: admit.ServerError, detail: "content-encoding gzip",
		},
		{
			name: "headers then silence and a late close", kind: "openai",
			raw: func(c net.Conn) {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
				time.Sleep(400 * time.Millisecond)
			},
			want: admit.ServerError, detail: "without content",
			check: func(t *testing.T, obs Observation) {
				assert.GreaterOrEqual(t, ms(obs.Elapsed), 390.0, "elapsed runs to the close, not the headers")
			},
		},
		{
			name: "not http at all", kind: "ollama",
			raw:  func(c net.Conn) { io.WriteString(c, "SSH-2.0-OpenSSH_9.6\r\n") },
			want: admit.ServerError, detail: "malformed response",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var base string
			if tt.raw != nil {
				base = rawServer(t, tt.raw)
			} else {
				base = loopback(t, tt.handler).URL
			}
			s := newTestSeat(t, tt.kind, base)
			var obs Observation
			var took time.Duration
			peak := memPeak(func() {
				start := time.Now()
				obs = do(t, s, hard, Request{WaitCap: tt.waitCap, Prompt: "hostile"})
				took = time.Since(start)
			})
			t.Logf("HOSTILE case=%q outcome=%s took_ms=%.1f heap_peak_mib=%.1f bytes=%d detail=%q", tt.name, obs.Outcome, ms(took), float64(peak)/(1<<20), obs.Bytes, obs.Detail)
			assert.Equal(t, tt.want, obs.Outcome, obs.Detail)
			assert.Contains(t, obs.Detail, tt.detail)
			// A ceiling only a hang reaches (realtime): the outcome above
			// says which clock ended the attempt.
			assert.Less(t, took, realtime.By(hard), "ended late")
			assert.Less(t, peak, uint64(maxHeap), "memory grew with the body")
			assert.Equal(t, admit.BillingOf(obs.Outcome, obs.Elapsed, 0), obs.Billing)
			if tt.check != nil {
				tt.check(t, obs)
			}
		})
	}
}

// TestConnectionRefused: nothing listening is a free conn_error, at once.
func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	obs := do(t, newTestSeat(t, "openai", "http://"+addr), time.Second, Request{})
	assert.Equal(t, admit.ConnError, obs.Outcome)
	assert.Equal(t, admit.Free, obs.Billing)
	assert.Equal(t, "connection refused", obs.Detail)
	assert.False(t, obs.HasTTFB)
	assert.Zero(t, obs.Tokens())
	// "at once": not at the hard timeout, which would have said timeout.
	assert.Less(t, obs.Elapsed, time.Second)
}

// TestNoHiddenRetry: a POST carrying an Idempotency-Key whose connection
// dies before the answer is sent once, not replayed by the transport.
func TestNoHiddenRetry(t *testing.T) {
	var conns atomic.Int32
	base := rawServer(t, func(c net.Conn) { conns.Add(1) })
	s := newTestSeat(t, "openai", base)
	for i := 0; i < 3; i++ {
		obs := do(t, s, time.Second, Request{IdempotencyKey: "job-1"})
		assert.Equal(t, admit.ServerError, obs.Outcome, obs.Detail)
	}
	assert.Equal(t, int32(3), conns.Load(), "one connection and one request per attempt")
}
