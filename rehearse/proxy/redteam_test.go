package proxy

// Hostile clients against the proxy's own HTTP/1.1 server (server.go):
// each test is a defect found by attacking it, and fails without its fix.
// Raw TCP on 127.0.0.1, with wire_test.go's helpers and shortened clocks.

import (
	"bufio"
	"bytes"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"retrygate/admit"
	"retrygate/rehearse/seat"
)

// liveConns counts the server's connections still running (their
// handler goroutines), across every proxy in this process.
func liveConns() int {
	return bytes.Count(stacks(), []byte("proxy.(*sconn).handle("))
}

// ownGoroutines counts the goroutines but the upstream's (net/http's
// server: the proxy keeps as many idle connections to it as it needed at
// once).
func ownGoroutines() int {
	n := 0
	for g := range bytes.SplitSeq(stacks(), []byte("\n\n")) {
		if !bytes.Contains(g, []byte("created by net/http.")) {
			n++
		}
	}
	return n
}

func stacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// pausedStream is an upstream whose stream answer sends its headers and
// first event, then waits for release before the rest.
func pausedStream(t *testing.T, release chan struct{}) string {
	t.Helper()
	ln := listen(t)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, wireStreamParts[0])
		_ = rc.Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, wireStreamParts[1]+wireStreamParts[2])
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })
	return "http://" + ln.Addr().String() + "/v1"
}

const wireStreamChat = `{"model":"m1","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`

// A stream whose headers left before the drain began cannot say
// Connection: close; once it ends, its connection is idle and must be
// closed then, not kept until the drain gives up (hard timeout + 2 s):
// Serve returns as soon as the stream is done.
func TestRedteamDrainAfterCommittedStream(t *testing.T) {
	release := make(chan struct{})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", pausedStream(t, release))})
	c := dialWire(t, px)
	c.write(wirePost(wireStreamChat, ""))
	require.NoError(t, c.c.SetReadDeadline(time.Now().Add(wireWait)))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodPost})
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.False(t, resp.Close, "committed before the drain")

	stopped := make(chan struct{})
	go func() { px.stop(); close(stopped) }()
	addr := strings.TrimPrefix(px.url, "http://")
	require.Eventually(t, func() bool {
		d, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = d.Close()
		}
		return err != nil
	}, wireWait, ms, "the drain began")
	close(release)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, benchStream, string(body), "the stream in flight is whole")
	c.closed(2 * time.Second) // the drain gives up only after 7 s
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		t.Fatal("Serve did not return once the stream was done")
	}
}

// A client that pipelines requests and never reads an answer fills the
// socket's buffers; the answer's write then waits on it. That write is
// bounded by the idle clock (the client read nothing for that long): the
// connection and its goroutines go, instead of living forever (net/http
// without a WriteTimeout kept them too, but it is one request a client
// can repeat on every connection it opens).
func TestRedteamClientNeverReads(t *testing.T) {
	setClock(t, &clientIdleTimeout, 300*ms)
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	before := liveConns()
	c := dialWire(t, px)
	require.NoError(t, c.c.SetReadBuffer(4<<10))
	// 20 × 300 KB answers: far more than the socket buffers hold.
	c.write(strings.Repeat("GET /v1/big HTTP/1.1\r\nHost: proxy\r\n\r\n", 20))
	require.Eventually(t, func() bool { return liveConns() == before }, 5*time.Second, 10*ms,
		"the connection of a client that reads nothing is kept")
}

// RFC 9112 §9.6: a server closing a connection must not reset it over
// bytes it never read, or the client's kernel may throw away the answer
// it has not read yet. Here the handler ends the connection (a 1.0
// answer of unknown length ends with it) while the client has pipelined
// a request and then more bytes: the answer still arrives whole, ended by
// a close, not a reset.
func TestRedteamLingerAfterHandlerClose(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	require.NoError(t, c.c.SetReadBuffer(32<<10))
	c.write("GET /v1/big HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + wireGetModels)
	time.Sleep(100 * ms) // both are read; the second waits for the handler
	c.write(strings.Repeat("x", 64<<10))
	time.Sleep(100 * ms)
	require.NoError(t, c.c.SetReadDeadline(time.Now().Add(wireWait)))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodGet})
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	assert.True(t, resp.Close)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the answer ends with a close, not a reset")
	require.Equal(t, len(wireBig), len(body))
}

// A new connection's first request has readHeaderTimeout for its header
// block from the moment it connects (docs/proxy.md; net/http counts it
// so). A client that sends its first byte just before the clock runs out
// and then dribbles must not get a second full clock from that byte.
func TestRedteamFirstRequestHeaderClock(t *testing.T) {
	setClock(t, &readHeaderTimeout, 500*ms)
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	t0 := time.Now()
	c := dialWire(t, px)
	time.Sleep(450 * ms)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for _, b := range []byte("GET /v1/models HTTP/1.1\r\nHost: proxy\r\nX-Slow: ") {
			if _, err := c.c.Write([]byte{b}); err != nil {
				return
			}
			select {
			case <-done:
				return
			case <-time.After(20 * ms):
			}
		}
	}()
	got := c.rest(wireWait)
	took := time.Since(t0)
	assert.GreaterOrEqual(t, took, 500*ms, "closed before its clock")
	assert.Less(t, took, 850*ms, "the first byte started a second header clock")
	assert.NotContains(t, got, "200 OK")
	assert.Empty(t, u.requests())
}

// An upstream answering a status below 100 ("000", which Go's parser
// takes) made the ResponseWriter panic: the panic was caught, but the
// attempt's row was never written and the job's books kept it in flight
// for ever. It is a malformed answer: 502 to the client, and a row.
func TestRedteamUpstreamStatusBelow100(t *testing.T) {
	base, _ := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, _, ok := readReq(br); ok {
			_, _ = io.WriteString(c, "HTTP/1.1 000 Zero\r\nContent-Length: 2\r\n\r\n{}")
		}
	})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	c := dialWire(t, px)
	c.write(wirePost(wireChat("m1"), "X-Retrygate-Job: zero\r\n"))
	resp, _ := c.answer(http.MethodPost)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	rs := px.rows.wait(t, 1)
	assert.Equal(t, 0, rs[0].HTTPStatus)
}

// Hostile clients of every kind, each leaving in its own way: once they
// are gone and the clocks have run out, none of their connections (a
// reader and a handler each) is left, and the goroutine count is back
// where it was.
func TestRedteamNoConnectionLeft(t *testing.T) {
	setClock(t, &readHeaderTimeout, 200*ms)
	setClock(t, &bodyTimeout, 200*ms)
	setClock(t, &clientIdleTimeout, 300*ms)
	u := wireUpstream(t, nil)
	px := wireProxy(t, u, smallBody)
	c := dialWire(t, px) // warm the upstream connection
	c.write(wireGetModels)
	c.answer(http.MethodGet)
	require.NoError(t, c.c.Close())
	require.Eventually(t, func() bool { return liveConns() == 0 }, wireWait, 10*ms)
	g0 := ownGoroutines()

	expect := strings.TrimSuffix(wirePost(wireChat("e"), "Expect: 100-continue\r\n"), wireChat("e"))
	for name, send := range map[string]string{
		"silent":              "",
		"half a header":       "GET /v1/models HTTP/1.1\r\nHost: p\r\n",
		"half a body":         wirePost(wireChat("a"), "")[:len(wirePost(wireChat("a"), ""))-5],
		"expect, no body":     expect,
		"pipelined burst":     strings.Repeat(wireGetModels, 200) + wirePost(wireChat("b"), "") + "GET /v1/big HTTP/1.1\r\nHost: p\r\n\r\n",
		"431":                 "GET / HTTP/1.1\r\nHost: p\r\nX: " + strings.Repeat("y", 2*MaxHeaderBytes) + "\r\n\r\n",
		"413 and more":        "POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + strings.Repeat("z", 0x800) + "\r\n",
		"garbage":             "\x00\x01\x02 GARBAGE\r\n\r\n" + wireGetModels,
		"close then more":     "GET /v1/models HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n" + strings.Repeat("x", 100<<10),
		"stream, half-closed": wirePost(wireStreamChat, ""),
	} {
		for _, how := range []string{"close", "half-close", "stay"} {
			nc, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
			require.NoError(t, err, name)
			_, _ = io.WriteString(nc, send)
			switch how {
			case "close":
				_ = nc.Close()
			case "half-close":
				_ = nc.(*net.TCPConn).CloseWrite()
				defer nc.Close()
			default:
				defer nc.Close() // reads nothing, sends nothing more
			}
		}
	}
	require.Eventually(t, func() bool { return liveConns() == 0 }, 5*time.Second, 10*ms,
		"connections left after every clock ran out")
	// Polled here, not by Eventually (which asks on a goroutine of its own).
	for end := time.Now().Add(5 * time.Second); ownGoroutines() > g0; time.Sleep(10 * ms) {
		if time.Now().After(end) {
			t.Fatalf("goroutines left: %d, before %d\n%s", ownGoroutines(), g0, stacks())
		}
	}
}

// endlessStream is an upstream whose stream answer never ends (until the
// proxy's request does, counted in done).
func endlessStream(t *testing.T) (base string, done chan struct{}) {
	t.Helper()
	done = make(chan struct{}, 1)
	ln := listen(t)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = io.WriteString(w, wireModels)
			return
		}
		defer func() { done <- struct{}{} }()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		event := `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"}}]}` + "\n\n"
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, event); err != nil || rc.Flush() != nil {
				return
			}
			time.Sleep(ms)
		}
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })
	return "http://" + ln.Addr().String() + "/v1", done
}

// A client that pipelines a request behind a stream and then closes its
// connection: the reader, holding the pipelined request for the handler,
// reads no more, so only the stream's next write can tell that the
// client is gone. That failed write is the hang-up: the attempt is
// cancelled at once (its row says so) and the upstream request ends,
// instead of the stream running on for nobody until the hard timeout.
func TestRedteamPipelinedClientGoneMidStream(t *testing.T) {
	base, upDone := endlessStream(t)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)}) // hard timeout 5 s
	c := dialWire(t, px)
	c.write(wirePost(wireStreamChat, "X-Retrygate-Job: piped\r\n") + wireGetModels)
	require.NoError(t, c.c.SetReadDeadline(time.Now().Add(wireWait)))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodPost})
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	_, err = io.ReadFull(resp.Body, make([]byte, 1000))
	require.NoError(t, err)
	require.NoError(t, c.c.SetLinger(0))
	require.NoError(t, c.c.Close())
	select {
	case <-upDone:
	case <-time.After(2 * time.Second):
		t.Fatal("the stream ran on for a client that is gone")
	}
	rs := px.rows.wait(t, 1)
	assert.Equal(t, admit.Cancelled, rs[0].Outcome)
}

// A client that half-closes while its pass-through request waits on the
// upstream is gone (as for a gated request, TestWireHangUp): the
// upstream request is cancelled, and the client must read nothing but
// the close. It read a made-up 502 "upstream unreachable", for an
// upstream that was reachable and about to answer.
func TestRedteamPassThroughHangUpNoMadeUpAnswer(t *testing.T) {
	arrived := make(chan struct{}, 1)
	base, _ := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, _, ok := readReq(br); ok {
			arrived <- struct{}{}
			time.Sleep(300 * ms) // the upstream thinks; the client leaves meanwhile
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
		}
	})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	c := dialWire(t, px)
	c.write(wireGetModels)
	select {
	case <-arrived: // the request is upstream: the hang-up cancels it there
	case <-time.After(wireWait):
		t.Fatal("the request never reached the upstream")
	}
	require.NoError(t, c.c.CloseWrite())
	assert.Empty(t, c.rest(wireWait), "no answer, only the close")
}
