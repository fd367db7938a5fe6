package proxy

// The wire contract: what a client on a raw TCP connection sees of the
// proxy's HTTP/1.1 server side (RFC 9112), whatever server implements it.
// Each test writes exact bytes and reads the answers with
// http.ReadResponse; every read is bounded, so a hang fails.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"retrygate/admit"
	"retrygate/rehearse/seat"
)

// wireWait bounds every read of an answer: far above what any answer
// here takes, far below go test's own timeout.
const wireWait = 5 * time.Second

// wireUp is an upstream that records every request it parses and every
// byte it receives, so a test can prove what reached it (and what did
// not). Gated requests get a chat completion echoing the model they
// named (a stream, of unknown length, when they ask for one); GET and
// HEAD /v1/models a model list; anything else 404.
type wireUp struct {
	base string // base_url for a seat

	mu   sync.Mutex
	reqs []wireReq
	raw  bytes.Buffer
	// hold, when set, keeps every answer until it is closed or the
	// proxy's upstream request ends (counted in cancelled).
	hold      chan struct{}
	cancelled atomic.Int32
}

type wireReq struct {
	method, target string
	header         http.Header
	body           string
}

const wireModels = `{"object":"list","data":[{"id":"m1","object":"model"}]}`

func wireUpstream(t testing.TB, hold chan struct{}) *wireUp {
	t.Helper()
	u := &wireUp{hold: hold}
	ln := listen(t)
	srv := &http.Server{Handler: u, ErrorLog: nil}
	go func() { _ = srv.Serve(teeListener{ln, u}) }()
	t.Cleanup(func() { _ = srv.Close() })
	u.base = "http://" + ln.Addr().String() + "/v1"
	return u
}

func (u *wireUp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.reqs = append(u.reqs, wireReq{r.Method, r.RequestURI, r.Header.Clone(), string(body)})
	hold := u.hold
	u.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			u.cancelled.Add(1)
			return
		}
	}
	switch {
	case r.URL.Path == "/v1/models" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(wireModels)))
		_, _ = io.WriteString(w, wireModels)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		_ = json.Unmarshal(body, &req)
		if req.Stream {
			// No length: the proxy must frame it for its client.
			w.Header().Set("Content-Type", "text/event-stream")
			rc := http.NewResponseController(w)
			for _, part := range wireStreamParts {
				_, _ = io.WriteString(w, part)
				_ = rc.Flush()
			}
			return
		}
		b := wireAnswer(req.Model)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		_, _ = io.WriteString(w, b)
	default:
		http.NotFound(w, r)
	}
}

// wireAnswer is the upstream's answer to a non-streamed chat request.
func wireAnswer(model string) string {
	return `{"id":"c","object":"chat.completion","model":"` + model +
		`","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`
}

// wireStreamParts is benchStream as the upstream flushes it: in three
// writes, so the proxy forwards it in several pieces.
var wireStreamParts = []string{benchStream[:100], benchStream[100:1000], benchStream[1000:]}

func (u *wireUp) requests() []wireReq {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]wireReq(nil), u.reqs...)
}

func (u *wireUp) received() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.raw.String()
}

// teeListener's connections copy every byte they read to u.raw.
type teeListener struct {
	net.Listener
	u *wireUp
}

func (l teeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return teeConn{c, l.u}, nil
}

type teeConn struct {
	net.Conn
	u *wireUp
}

func (c teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.u.mu.Lock()
	c.u.raw.Write(p[:n])
	c.u.mu.Unlock()
	return n, err
}

// wireProxy is a proxy (openai) in front of u, with tweaks.
func wireProxy(t testing.TB, u *wireUp, tweak ...func(*Options)) *running {
	t.Helper()
	return start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", u.base)}, tweak...)
}

// wc is one raw client connection to the proxy.
type wc struct {
	t  testing.TB
	c  *net.TCPConn
	br *bufio.Reader
}

func dialWire(t testing.TB, px *running) *wc {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &wc{t: t, c: c.(*net.TCPConn), br: bufio.NewReader(c)}
}

func (w *wc) write(s string) {
	w.t.Helper()
	_, err := io.WriteString(w.c, s)
	require.NoError(w.t, err)
}

// answer reads one answer to a request of method, with its whole body.
func (w *wc) answer(method string) (*http.Response, string) {
	w.t.Helper()
	require.NoError(w.t, w.c.SetReadDeadline(time.Now().Add(wireWait)))
	resp, err := http.ReadResponse(w.br, &http.Request{Method: method})
	require.NoError(w.t, err, "reading the answer's head")
	b, err := io.ReadAll(resp.Body)
	require.NoError(w.t, err, "reading the answer's body")
	_ = resp.Body.Close()
	return resp, string(b)
}

// closed asserts the server closes the connection with nothing more to
// say: a read ends (EOF, or a reset when the server dropped unread
// bytes) within wait.
func (w *wc) closed(wait time.Duration) {
	w.t.Helper()
	require.NoError(w.t, w.c.SetReadDeadline(time.Now().Add(wait)))
	b, err := io.ReadAll(w.br)
	require.Empty(w.t, string(b), "bytes after the last answer")
	if err != nil {
		var ne net.Error
		require.False(w.t, errors.As(err, &ne) && ne.Timeout(), "the server kept the connection open")
		require.True(w.t, errors.Is(err, syscall.ECONNRESET), "closed: %v", err)
	}
}

// post is a gated request with body, extra header lines (each ending
// CRLF) after Host.
func wirePost(body, extra string) string {
	return "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n", len(body)) + extra + "\r\n" + body
}

func wireChat(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
}

const wireGetModels = "GET /v1/models HTTP/1.1\r\nHost: proxy\r\n\r\n"

// The refusal body for a request over a MaxBody of 1 KiB, in the openai
// shape.
const wireTooLarge = `{"error":{"code":"request_too_large","message":"retrygate: request body over 1024 bytes","type":"invalid_request_error"}}`

func smallBody(o *Options) { o.MaxBody = 1 << 10 }

// RFC 9112 §9.3: an HTTP/1.1 connection persists; two gated requests on
// one connection are both answered, in order, each a row.
func TestWireKeepAlive(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	for _, m := range []string{"first", "second"} {
		c.write(wirePost(wireChat(m), ""))
		resp, body := c.answer(http.MethodPost)
		require.Equal(t, 200, resp.StatusCode)
		assert.False(t, resp.Close, "the connection is kept")
		assert.Equal(t, wireAnswer(m), body)
	}
	rs := px.rows.wait(t, 2)
	require.Len(t, rs, 2)
	for _, r := range rs {
		assert.Equal(t, admit.OK, r.Outcome)
	}
	reqs := u.requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, wireChat("first"), reqs[0].body)
	assert.Equal(t, wireChat("second"), reqs[1].body)
}

// RFC 9112 §9.3.2: requests pipelined in one write are answered in the
// order they came, each whole.
func TestWirePipelining(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	c.write(wirePost(wireChat("a"), "") + wireGetModels + wirePost(wireChat("b"), ""))
	resp, body := c.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, wireAnswer("a"), body)
	resp, body = c.answer(http.MethodGet)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, wireModels, body)
	resp, body = c.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, wireAnswer("b"), body)
	assert.Len(t, px.rows.wait(t, 2), 2)
	assert.Len(t, u.requests(), 3)
}

// RFC 9112 §9.6: a request with "Connection: close" gets its answer,
// saying close, and then the server closes the connection.
func TestWireConnectionClose(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	c.write(wirePost(wireChat("a"), "Connection: close\r\n"))
	resp, body := c.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode)
	assert.True(t, resp.Close, "the answer says close")
	assert.Equal(t, wireAnswer("a"), body)
	c.closed(wireWait)
	px.rows.wait(t, 1)
}

// RFC 9112 §6.1, §6.3, §9.3: an HTTP/1.0 request (no Host needed) is
// answered without chunked framing, which a 1.0 client cannot read: a
// stream of unknown length ends with the connection; a refusal has its
// Content-Length; without keep-alive the connection then closes.
func TestWireHTTP10(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u, smallBody)
	stream := `{"model":"m1","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`
	c := dialWire(t, px)
	c.write(fmt.Sprintf("POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(stream), stream))
	var raw bytes.Buffer
	require.NoError(t, c.c.SetReadDeadline(time.Now().Add(wireWait)))
	_, err := io.Copy(&raw, c.br) // to the server's close: the body's end
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw.Bytes())), &http.Request{Method: http.MethodPost, ProtoMajor: 1})
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 1, resp.ProtoMajor)
	assert.Empty(t, resp.TransferEncoding, "no chunked framing to a 1.0 client")
	assert.NotContains(t, strings.ToLower(raw.String()), "transfer-encoding")
	assert.Equal(t, benchStream, string(body))
	assert.Len(t, px.rows.wait(t, 1), 1)

	c = dialWire(t, px)
	big := wireChat(strings.Repeat("x", 2<<10))
	c.write(fmt.Sprintf("POST /v1/chat/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s", len(big), big))
	resp, b := c.answer(http.MethodPost)
	require.Equal(t, 413, resp.StatusCode)
	assert.Equal(t, int64(len(wireTooLarge)), resp.ContentLength)
	assert.JSONEq(t, wireTooLarge, b)
	c.closed(wireWait)
}

// RFC 9112 §9.3 (HTTP/1.0 keep-alive, RFC 2068 §19.7.1): a 1.0 client
// asking for keep-alive keeps its connection when the answer has a
// length.
func TestWireHTTP10KeepAlive(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	for _, m := range []string{"a", "b"} {
		body := wireChat(m)
		c.write(fmt.Sprintf("POST /v1/chat/completions HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
		resp, got := c.answer(http.MethodPost)
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, wireAnswer(m), got)
		assert.False(t, resp.Close)
	}
	c.write("GET /v1/models HTTP/1.0\r\n\r\n") // no keep-alive: the last
	resp, got := c.answer(http.MethodGet)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, wireModels, got)
	c.closed(wireWait)
}

// RFC 9112 §7.1: a chunked request body (chunk extensions and a trailer
// included) is read whole and forwarded with its length.
func TestWireChunkedRequest(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	body := wireChat("chunked")
	c := dialWire(t, px)
	c.write("POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n", 10, body[:10]) +
		fmt.Sprintf("%X;ext=1\r\n%s\r\n", len(body)-10, body[10:]) +
		"0\r\nX-Trailer: t\r\n\r\n")
	resp, got := c.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, wireAnswer("chunked"), got)
	reqs := u.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, body, reqs[0].body)
	assert.Equal(t, fmt.Sprint(len(body)), reqs[0].header.Get("Content-Length"))
	assert.Empty(t, reqs[0].header.Get("Transfer-Encoding"))
	// The connection is still good for the next request.
	c.write(wireGetModels)
	resp, _ = c.answer(http.MethodGet)
	assert.Equal(t, 200, resp.StatusCode)
	px.rows.wait(t, 1)
}

var _ = os.Getpid
