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
	"log"
	"net"
	"net/http"
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
	// hold, when set, keeps the answer to a chat request for model
	// "slow" until it is closed or the proxy's upstream request ends
	// (counted in cancelled).
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
	srv := &http.Server{Handler: u, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(teeListener{ln, u}) }()
	t.Cleanup(func() { _ = srv.Close() })
	u.base = "http://" + ln.Addr().String() + "/v1"
	return u
}

func (u *wireUp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.reqs = append(u.reqs, wireReq{r.Method, r.RequestURI, r.Header.Clone(), string(body)})
	u.mu.Unlock()
	if u.hold != nil && bytes.Contains(body, []byte(`"model":"slow"`)) {
		select {
		case <-u.hold:
		case <-r.Context().Done():
			u.cancelled.Add(1)
			return
		}
	}
	switch {
	case r.URL.Path == "/v1/big" && r.Method == http.MethodGet:
		// No length, and larger than any buffer on the way.
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = io.WriteString(w, wireBig)
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

// wireBig is the upstream's answer to GET /v1/big: 300 KB that differ
// from line to line, so a byte of one answer in another shows.
var wireBig = func() string {
	var b strings.Builder
	for i := 0; b.Len() < 300<<10; i++ {
		fmt.Fprintf(&b, "line %06d of the big answer\n", i)
	}
	return b.String()
}()

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
	// raw is every byte read from the server since the last reset: one
	// answer's exact bytes, when it is reset before each request.
	raw *bytes.Buffer
}

func dialWire(t testing.TB, px *running) *wc {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	raw := &bytes.Buffer{}
	return &wc{t: t, c: c.(*net.TCPConn), br: bufio.NewReader(io.TeeReader(c, raw)), raw: raw}
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

// rest is what the server sends until it closes the connection (EOF,
// or a reset when it dropped unread bytes), which it must within wait.
func (w *wc) rest(wait time.Duration) string {
	w.t.Helper()
	require.NoError(w.t, w.c.SetReadDeadline(time.Now().Add(wait)))
	b, err := io.ReadAll(w.br)
	if err != nil {
		var ne net.Error
		require.False(w.t, errors.As(err, &ne) && ne.Timeout(), "the server kept the connection open; it sent %q", b)
		require.True(w.t, errors.Is(err, syscall.ECONNRESET), "closed: %v", err)
	}
	return string(b)
}

// closed asserts the server closes the connection within wait with
// nothing more to say.
func (w *wc) closed(wait time.Duration) {
	w.t.Helper()
	require.Empty(w.t, w.rest(wait), "bytes after the last answer")
}

// setClock shortens one of the server's clocks (serve.go) for a test,
// which must then not run in parallel; the proxy must start after it.
func setClock(t testing.TB, v *time.Duration, d time.Duration) {
	old := *v
	*v = d
	t.Cleanup(func() { *v = old })
}

// wirePost is a gated request with body, and extra header lines (each
// ending CRLF) after Host.
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
// saying close, and then the server closes the connection; a request
// pipelined behind it is not processed.
func TestWireConnectionClose(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	c.write(wirePost(wireChat("a"), "Connection: close\r\n") + wirePost(wireChat("after"), ""))
	resp, body := c.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode)
	assert.True(t, resp.Close, "the answer says close")
	assert.Equal(t, wireAnswer("a"), body)
	c.closed(wireWait)
	px.rows.wait(t, 1)
	require.Len(t, u.requests(), 1, "nothing after the close was processed")
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
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw.Bytes())), &http.Request{Method: http.MethodPost})
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

// RFC 9110 §10.1.1: a client sending "Expect: 100-continue" gets 100
// (Continue) before it sends the body, then the answer.
func TestWireExpectContinue(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u, smallBody)
	body := wireChat("expect")
	c := dialWire(t, px)
	c.write(strings.TrimSuffix(wirePost(body, "Expect: 100-continue\r\n"), body))
	resp, _ := c.answer(http.MethodPost)
	require.Equal(t, 100, resp.StatusCode, "the body is needed: 100 first")
	c.write(body)
	resp, got := c.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, wireAnswer("expect"), got)
	c.write(wireGetModels)
	resp, _ = c.answer(http.MethodGet)
	assert.Equal(t, 200, resp.StatusCode, "the connection is kept")
	px.rows.wait(t, 1)
}

// RFC 9110 §10.1.1: an HTTP/1.0 client is never sent 100 (Continue),
// whatever its Expect says: it sends its body at once and gets the
// answer alone.
func TestWireExpectContinueHTTP10(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	body := wireChat("ten")
	c := dialWire(t, px)
	c.write(fmt.Sprintf("POST /v1/chat/completions HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	resp, got := c.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode, "the answer, no 100 first")
	assert.Equal(t, wireAnswer("ten"), got)
	c.closed(wireWait)
}

// RFC 9110 §10.1.1, RFC 9112 §9.6: a declared body over MaxBody with
// "Expect: 100-continue" gets 413; a server may answer at once or ask
// for the body first (net/http does: it sends 100 and reads MaxBody+1
// bytes), and either way the body is never read as a request after it:
// the connection closes and the upstream sees nothing.
func TestWireExpectTooLarge(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u, smallBody)
	// The body hides a request that must never be taken as one.
	hidden := wirePost(wireChat("SMUGGLED"), "")
	body := hidden + strings.Repeat(" ", 2<<10-len(hidden))
	c := dialWire(t, px)
	c.write(strings.TrimSuffix(wirePost(body, "Expect: 100-continue\r\n"), body))
	resp, got := c.answer(http.MethodPost)
	if resp.StatusCode == 100 {
		t.Log("100 Continue before the 413: the server read the body")
		c.write(body)
		resp, got = c.answer(http.MethodPost)
	} else {
		c.write(body) // a client may send it anyway
	}
	require.Equal(t, 413, resp.StatusCode)
	assert.JSONEq(t, wireTooLarge, got)
	assert.True(t, resp.Close, "the answer says close")
	c.closed(wireWait)
	assert.Empty(t, u.requests())
	assert.Empty(t, px.rows.all())
}

// RFC 6585 §5: a header block over MaxHeaderBytes gets 431 and the
// connection closes; one well inside it is served.
func TestWireHeaderTooLarge(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	c.write(wirePost(wireChat("big"), "X-Big: "+strings.Repeat("y", MaxHeaderBytes*3/4)+"\r\n"))
	resp, got := c.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode, "a header block of 3/4 the bound is served")
	assert.Equal(t, wireAnswer("big"), got)

	c = dialWire(t, px)
	c.write(wirePost(wireChat("bigger"), "X-Big: "+strings.Repeat("y", 2*MaxHeaderBytes)+"\r\n"))
	resp, _ = c.answer(http.MethodPost)
	require.Equal(t, 431, resp.StatusCode)
	assert.True(t, resp.Close)
	c.closed(wireWait)
	assert.Len(t, u.requests(), 1)
}

// RFC 9110 §15.5.14, RFC 9112 §9.6: a body over MaxBody, declared or
// chunked, gets 413 in the provider's error shape with its length; the
// connection then closes, so the body's rest (here a request pipelined
// behind it) is never read as a request. (The RFC would also let a
// server read the rest and go on; the proxy closes, as net/http does,
// rather than read up to any size for nothing.)
func TestWireBodyTooLarge(t *testing.T) {
	big := wireChat(strings.Repeat("x", 2<<10))
	for name, req := range map[string]string{
		"content-length": wirePost(big, ""),
		"chunked": "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big),
	} {
		t.Run(name, func(t *testing.T) {
			u := wireUpstream(t, nil)
			px := wireProxy(t, u, smallBody)
			c := dialWire(t, px)
			c.write(req + wirePost(wireChat("SMUGGLED"), ""))
			resp, got := c.answer(http.MethodPost)
			require.Equal(t, 413, resp.StatusCode)
			assert.JSONEq(t, wireTooLarge, got)
			assert.Equal(t, int64(len(got)), resp.ContentLength)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			assert.Equal(t, "request_too_large", resp.Header.Get("X-Retrygate-Refused"))
			assert.True(t, resp.Close, "the answer says close")
			c.closed(wireWait)
			assert.Empty(t, u.requests())
			assert.Empty(t, px.rows.all())
		})
	}
}

// wireSmuggled is a request hidden behind another: it must never reach
// the upstream as one.
var wireSmuggled = wirePost(wireChat("SMUGGLED"), "")

// RFC 9112 §2.2, §3, §5, §6.1, §6.3 and RFC 9110 §10.1.1: a request
// whose head or framing is malformed gets a 4xx (501 for a transfer
// coding the server does not know, 505 for a version it does not speak)
// and the connection closes: nothing behind it is read as a request, and
// nothing reaches the upstream.
func TestWireMalformed(t *testing.T) {
	const post = "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
	tests := []struct {
		name   string
		req    string
		status []int // any of
	}{
		{"not a request line", "GARBAGE\r\n\r\n", []int{400}},
		{"HTTP/0.9 request line", "GET /v1/models\r\n\r\n", []int{400}},
		{"space in request-target", "GET /v1/mo dels HTTP/1.1\r\nHost: proxy\r\n\r\n", []int{400}},
		{"HTTP/2.0 request line", "GET /v1/models HTTP/2.0\r\nHost: proxy\r\n\r\n", []int{505}},
		{"header line without colon", post + "NoColon\r\nContent-Length: 2\r\n\r\n{}", []int{400}},
		{"space before colon", post + "Content-Length : 2\r\n\r\n{}", []int{400}},
		{"control byte in a value", post + "X-A: a\x01b\r\nContent-Length: 2\r\n\r\n{}", []int{400}},
		{"bare CR in a value", post + "X-A: a\rb\r\nContent-Length: 2\r\n\r\n{}", []int{400}},
		{"Content-Length list", post + "Content-Length: 12, 13\r\n\r\n{}", []int{400}},
		{"negative Content-Length", post + "Content-Length: -1\r\n\r\n{}", []int{400}},
		{"signed Content-Length", post + "Content-Length: +2\r\n\r\n{}", []int{400}},
		{"two Content-Lengths", post + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", []int{400}},
		{"unknown transfer coding", post + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", []int{501}},
		{"identity transfer coding", post + "Transfer-Encoding: identity\r\n\r\n", []int{501, 400}},
		{"two Transfer-Encoding fields", post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []int{501, 400}},
		{"HTTP/1.1 without Host", "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", []int{400}},
		{"two Hosts", "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 2\r\n\r\n{}", []int{400}},
		{"unknown expectation", post + "Expect: 200-ok\r\nContent-Length: 2\r\n\r\n{}", []int{417}},
	}
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialWire(t, px)
			c.write(tt.req + wireSmuggled)
			resp, body := c.answer(http.MethodPost)
			assert.Contains(t, tt.status, resp.StatusCode)
			assert.True(t, resp.Close, "the answer says close")
			assert.NotEmpty(t, resp.Header.Get("Date"))
			assert.Equal(t, int64(len(body)), resp.ContentLength, "a length, not the close, ends the body")
			c.closed(wireWait)
		})
	}
	assert.Empty(t, u.requests())
	assert.NotContains(t, u.received(), "SMUGGLED")
	assert.Empty(t, px.rows.all())
}

// RFC 9112 §6.1, §6.3, §7.1: framing that a front end and this server
// could read differently, each with a request hidden behind it.
//
//   - Content-Length beside chunked (HTTP/1.1): chunked wins (the body is
//     empty: a 400), never the length, which would take the hidden
//     request as body; §6.3 then says close the connection.
//   - Transfer-Encoding on an HTTP/1.0 request is faulty framing (§6.1):
//     an error, and close.
//   - A malformed chunk size: an error, and close.
//
// net/http's server, which the proxy used before its own, kept the
// connection in the first two cases (so the hidden request was read as
// the next one and forwarded), and answered the third 200 with an empty
// body.
// RFC 9110 §9.3.6: the proxy is a gateway in front of one origin, not a
// forward proxy: CONNECT is refused, and never sent on to the origin.
func TestWireConnectRefused(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	c.write("CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n")
	resp, _ := c.answer(http.MethodConnect)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	c.closed(wireWait)
	assert.Empty(t, u.requests())
}

func TestWireSmuggling(t *testing.T) {
	const chunked = "0\r\n\r\n"
	tests := []struct{ name, req string }{
		{"Content-Length and chunked", "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n" +
			fmt.Sprintf("Content-Length: %d\r\n", len(chunked)+len(wireSmuggled)) +
			"Transfer-Encoding: chunked\r\n\r\n" + chunked + wireSmuggled},
		{"Transfer-Encoding on HTTP/1.0", "POST /v1/chat/completions HTTP/1.0\r\nContent-Length: 5\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n" + chunked + wireSmuggled},
		{"Transfer-Encoding on HTTP/1.0 keep-alive", "POST /v1/chat/completions HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 5\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n" + chunked + wireSmuggled},
		{"bad chunk size", "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"zz\r\n{}\r\n0\r\n\r\n" + wireSmuggled},
	}
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialWire(t, px)
			c.write(tt.req)
			resp, _ := c.answer(http.MethodPost)
			assert.Equal(t, 400, resp.StatusCode)
			c.closed(wireWait)
		})
	}
	assert.Empty(t, u.requests(), "nothing reached the upstream")
	assert.NotContains(t, u.received(), "SMUGGLED")
}

// RFC 9112 §2.2, §3.2.2, §5.2: what a server may tolerate, net/http
// does, and a client may rely on. A bare LF ends a line; an obs-fold is
// replaced by a space before the value is forwarded (never forwarded as
// a line break); an absolute-form request-target is accepted and still
// goes to the seat's origin, never to the host it names.
func TestWireTolerated(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)

	c := dialWire(t, px)
	c.write("GET /v1/models HTTP/1.1\nHost: proxy\n\n")
	resp, body := c.answer(http.MethodGet)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, wireModels, body)

	c = dialWire(t, px)
	c.write(wirePost(wireChat("fold"), "X-Folded: a\r\n b\r\n"))
	resp, _ = c.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode, "an obs-fold is replaced by a space (Go's parser does)")
	reqs := u.requests()
	assert.Equal(t, "a b", reqs[len(reqs)-1].header.Get("X-Folded"))

	c = dialWire(t, px)
	c.write("GET http://evil.example/v1/models HTTP/1.1\r\nHost: evil.example\r\n\r\n")
	resp, body = c.answer(http.MethodGet)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, wireModels, body)
	reqs = u.requests()
	assert.Equal(t, "/v1/models", reqs[len(reqs)-1].target)
	assert.NotContains(t, u.received(), "evil.example")
}

// RFC 9113 §3.4 on an HTTP/1.1-only listener: the HTTP/2 connection
// preface is refused with a 4xx or 505 and the connection closes, no
// hang. (net/http hands "PRI *" to the handler, which forwards it to the
// seat as a pass-through; the seat's 404 is what the client sees.)
func TestWireHTTP2Preface(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	c.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	resp, _ := c.answer(http.MethodGet)
	assert.True(t, resp.StatusCode == 505 || resp.StatusCode/100 == 4, "status %d", resp.StatusCode)
	c.closed(wireWait)
	assert.Empty(t, px.rows.all())
}

// RFC 9110 §9.3.1, §9.3.2: a GET off the gated endpoint passes through;
// HEAD gets GET's head and no body (the answer pipelined behind it
// starts right after its head); neither is a row.
func TestWirePassThrough(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	c.write(wireGetModels)
	resp, body := c.answer(http.MethodGet)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, wireModels, body)
	assert.Equal(t, int64(len(wireModels)), resp.ContentLength)
	c.write("HEAD /v1/models HTTP/1.1\r\nHost: proxy\r\n\r\n" + wireGetModels)
	resp, body = c.answer(http.MethodHead)
	require.Equal(t, 200, resp.StatusCode)
	assert.Empty(t, body)
	assert.Equal(t, fmt.Sprint(len(wireModels)), resp.Header.Get("Content-Length"), "GET's length")
	resp, body = c.answer(http.MethodGet)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, wireModels, body, "no body bytes after HEAD's head")
	reqs := u.requests()
	require.Len(t, reqs, 3)
	assert.Equal(t, http.MethodHead, reqs[1].method)
	px.stop()
	assert.Empty(t, px.rows.all())
}

// RFC 9110 §15.5.9: a client that sends half a header block and stops
// is closed after readHeaderTimeout (a 408 before the close is allowed;
// net/http sends nothing).
func TestWireSlowHeaders(t *testing.T) {
	setClock(t, &readHeaderTimeout, 200*ms)
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	t0 := time.Now() // before the server's clock can start
	c := dialWire(t, px)
	c.write("POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Length: 2\r\n")
	got := c.rest(wireWait)
	assert.GreaterOrEqual(t, time.Since(t0), 200*ms, "closed before its clock")
	if got != "" {
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
		require.NoError(t, err)
		assert.Equal(t, 408, resp.StatusCode)
	}
	assert.Empty(t, u.requests())
}

// A new connection that never sends a byte is closed on the header
// clock, not kept for the (longer) idle one.
func TestWireSilentConnection(t *testing.T) {
	setClock(t, &readHeaderTimeout, 200*ms)
	setClock(t, &clientIdleTimeout, time.Minute)
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	t0 := time.Now()
	c := dialWire(t, px)
	assert.Empty(t, c.rest(wireWait), "closed without a word")
	took := time.Since(t0)
	assert.GreaterOrEqual(t, took, 200*ms, "closed before its clock")
	assert.Less(t, took, 5*time.Second, "kept as if idle")
}

// An answer larger than the server's buffers (sent in pieces, chunked)
// and a small one after it on the same connection each arrive whole and
// alone: a buffer one answer used holds nothing of it for the next.
func TestWireBigAnswer(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	for range 3 {
		c.write("GET /v1/big HTTP/1.1\r\nHost: proxy\r\n\r\n")
		resp, body := c.answer(http.MethodGet)
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, []string{"chunked"}, resp.TransferEncoding)
		require.Equal(t, len(wireBig), len(body))
		require.True(t, body == wireBig, "the big answer, byte for byte")
		c.write(wireGetModels)
		resp, body = c.answer(http.MethodGet)
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, wireModels, body)
	}
}

// RFC 9112 §9.8 (a server may close an idle connection): a kept-alive
// connection with no next request is closed after clientIdleTimeout,
// silently, and not before.
func TestWireIdleTimeout(t *testing.T) {
	setClock(t, &clientIdleTimeout, 300*ms)
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	t0 := time.Now() // before the server's clock can start
	c.write(wirePost(wireChat("a"), ""))
	resp, _ := c.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode)
	c.closed(wireWait)
	assert.GreaterOrEqual(t, time.Since(t0), 300*ms, "closed before its clock")
	px.rows.wait(t, 1)
}

// RFC 9110 §15.5.9: a client that sends its headers and then dribbles
// its body (here: a tenth of it, then nothing) is closed once the body
// clock runs out (net/http: readHeaderTimeout + bodyTimeout from the
// request's start), and nothing reaches the upstream. Before the close
// it gets a 408 (net/http's server sent an empty 200).
func TestWireSlowBody(t *testing.T) {
	setClock(t, &readHeaderTimeout, 200*ms)
	setClock(t, &bodyTimeout, 200*ms)
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	t0 := time.Now() // before the server's clock can start
	c := dialWire(t, px)
	c.write("POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Length: 100\r\n\r\n{\"model\":")
	got := c.rest(wireWait)
	assert.GreaterOrEqual(t, time.Since(t0), 200*ms, "closed before its body clock")
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
	require.NoError(t, err)
	assert.Equal(t, 408, resp.StatusCode)
	assert.True(t, resp.Close, "Connection: close")
	assert.Empty(t, u.requests())
	assert.Empty(t, px.rows.all())
}

// RFC 9112 §9.6: a client that closes its connection while its gated
// request waits on the upstream cancels the upstream request at once
// (not at the hard timeout) and its row says cancelled. A client that
// only half-closes (FIN after the whole request, still reading) is taken
// as gone too (as net/http did: it cancels on the EOF it reads); that
// client then reads nothing but the close: no answer is made up for a
// request nobody waits for (net/http's server sent an empty 200).
func TestWireHangUp(t *testing.T) {
	for _, half := range []bool{false, true} {
		t.Run(map[bool]string{false: "close", true: "half-close"}[half], func(t *testing.T) {
			hold := make(chan struct{})
			u := wireUpstream(t, hold)
			t.Cleanup(func() { close(hold) })
			px := wireProxy(t, u)
			c := dialWire(t, px)
			c.write(wirePost(wireChat("slow"), "X-Retrygate-Job: gone\r\n"))
			require.Eventually(t, func() bool { return len(u.requests()) == 1 }, wireWait, ms)
			if half {
				require.NoError(t, c.c.CloseWrite())
				assert.Empty(t, c.rest(wireWait), "no answer, only the close")
			} else {
				require.NoError(t, c.c.Close())
			}
			require.Eventually(t, func() bool { return u.cancelled.Load() == 1 }, 2*time.Second, ms,
				"the upstream request was cancelled")
			rs := px.rows.wait(t, 1)
			assert.Equal(t, admit.Cancelled, rs[0].Outcome)
		})
	}
}

// RFC 9112 §4, §6.1, §7.1 and RFC 9110 §6.6.1: an answer to a 1.1
// client has the status line HTTP/1.1 and a Date; the proxy's own
// answer (a refusal) has its Content-Length, as has an upstream answer
// of known length; a stream of unknown length goes chunked, or with the
// length of what came when it came whole before the handler ended (the
// connection stays), its bytes exactly the upstream's.
func TestWireResponses(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	c := dialWire(t, px)
	head := func(resp *http.Response, status string) {
		t.Helper()
		assert.True(t, strings.HasPrefix(c.raw.String(), "HTTP/1.1 "+status+"\r\n"), "status line of %q", c.raw.String())
		assert.Equal(t, 1, resp.ProtoMinor)
		d, err := http.ParseTime(resp.Header.Get("Date"))
		require.NoError(t, err, "a Date")
		assert.WithinDuration(t, time.Now(), d, time.Minute)
	}

	c.raw.Reset()
	c.write(wirePost(`{"model":`, "")) // not JSON: the proxy's own 400
	resp, body := c.answer(http.MethodPost)
	head(resp, "400 Bad Request")
	assert.Equal(t, int64(len(body)), resp.ContentLength)
	assert.Empty(t, resp.TransferEncoding)
	assert.Equal(t, "invalid_json", resp.Header.Get("X-Retrygate-Refused"))
	assert.False(t, resp.Close)

	c.raw.Reset()
	c.write(wirePost(wireChat("a"), ""))
	resp, body = c.answer(http.MethodPost)
	head(resp, "200 OK")
	assert.Equal(t, int64(len(wireAnswer("a"))), resp.ContentLength)
	assert.Empty(t, resp.TransferEncoding)
	assert.Equal(t, wireAnswer("a"), body)

	c.raw.Reset()
	c.write(wirePost(`{"model":"m1","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`, ""))
	resp, body = c.answer(http.MethodPost)
	head(resp, "200 OK")
	if resp.ContentLength < 0 {
		assert.Equal(t, []string{"chunked"}, resp.TransferEncoding)
		assert.True(t, strings.HasSuffix(c.raw.String(), "\r\n0\r\n\r\n"), "the last chunk ends the body")
	} else {
		assert.Equal(t, int64(len(benchStream)), resp.ContentLength)
	}
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.Equal(t, benchStream, body, "the answer is the upstream's bytes")
	assert.False(t, resp.Close)

	c.write(wireGetModels)
	resp, _ = c.answer(http.MethodGet)
	assert.Equal(t, 200, resp.StatusCode, "the connection is kept after the stream")
	assert.Len(t, px.rows.wait(t, 2), 2)
}

// RFC 9112 §9.3: a hundred kept-alive connections at once, each sending
// three gated requests in turn: every one answered with its own body,
// every one a row.
func TestWireManyConnections(t *testing.T) {
	u := wireUpstream(t, nil)
	px := wireProxy(t, u)
	const conns, each = 100, 3
	addr := strings.TrimPrefix(px.url, "http://")
	one := func(i int) error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for k := range each {
			m := fmt.Sprintf("c%d-%d", i, k)
			if _, err := io.WriteString(c, wirePost(wireChat(m), "")); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(4 * wireWait))
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
			if err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
			if resp.StatusCode != 200 || string(b) != wireAnswer(m) || resp.Close {
				return fmt.Errorf("%s: %d close=%v %s", m, resp.StatusCode, resp.Close, b)
			}
		}
		return nil
	}
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() { errs <- one(i) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Len(t, px.rows.wait(t, conns*each), conns*each)
	assert.Len(t, u.requests(), conns*each)
}

// The proxy's drain (docs/proxy.md; RFC 9112 §9.6): cancelling Serve's
// context closes the listener and idle kept-alive connections at once,
// lets the request in flight finish with its whole answer and then
// closes its connection; Serve returns with every row written.
func TestWireDrain(t *testing.T) {
	hold := make(chan struct{})
	u := wireUpstream(t, hold)
	px := wireProxy(t, u)
	idle := dialWire(t, px)
	idle.write(wirePost(wireChat("quick"), ""))
	resp, _ := idle.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode)
	busy := dialWire(t, px)
	busy.write(wirePost(wireChat("slow"), "X-Retrygate-Job: drain\r\n"))
	require.Eventually(t, func() bool { return len(u.requests()) == 2 }, wireWait, ms)

	stopped := make(chan struct{})
	go func() { px.stop(); close(stopped) }()
	idle.closed(wireWait)
	_, err := net.DialTimeout("tcp", strings.TrimPrefix(px.url, "http://"), time.Second)
	assert.Error(t, err, "no new connection while draining")
	select {
	case <-stopped:
		t.Fatal("Serve returned with a request in flight")
	default:
	}
	close(hold)
	resp, body := busy.answer(http.MethodPost)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, wireAnswer("slow"), body, "the answer in flight is whole")
	busy.closed(wireWait)
	select {
	case <-stopped:
	case <-time.After(wireWait):
		t.Fatal("Serve did not return")
	}
	rs := px.rows.all() // no waiting: Serve has returned
	require.Len(t, rs, 2)
	for _, r := range rs {
		assert.Equal(t, admit.OK, r.Outcome)
	}
}

// A client that sends a streamed request and then never reads its answer
// (a slow-read attack, or a wedged app) holds its attempt only until the
// hard timeout: the write stuck on it is freed, the attempt ends timed
// out with its row, its slot is given back, and the upstream request
// ends. (net/http's server, without a write timeout, waited forever.)
func TestWireClientStopsReading(t *testing.T) {
	ln := listen(t)
	upDone := make(chan struct{})
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = io.WriteString(w, wireModels)
			return
		}
		defer close(upDone)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		event := []byte(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 4000) + `"}}]}` + "\n\n")
		rc := http.NewResponseController(w)
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
			if _, err := w.Write(event); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })
	pol := testPolicy()
	pol.Timeouts.Hard = 500 * ms
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", "http://"+ln.Addr().String()+"/v1")}, func(o *Options) { o.MaxConcurrent = 1 })
	c, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer c.Close()
	// A small receive window, so the stream backs up into the proxy soon.
	require.NoError(t, c.(*net.TCPConn).SetReadBuffer(4<<10))
	_, err = io.WriteString(c, wirePost(`{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "X-Retrygate-Job: stuck\r\n"))
	require.NoError(t, err)
	rs := px.rows.wait(t, 1)
	assert.Equal(t, admit.Timeout, rs[0].Outcome)
	select {
	case <-upDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was left running")
	}
	// The slot is free: the proxy (one slot) answers the next client.
	resp, err := http.Get(px.url + "/v1/models")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
