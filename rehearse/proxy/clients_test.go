package proxy

// Clients and upstreams that misbehave, against the proxy on net/http:
// what the client and the provider see, and what the log says.

import (
	"bufio"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
)

const streamChat = `{"model":"m1","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`

// pausedStream is an upstream whose stream answer (benchStream) sends its
// headers and first event, then waits for release before the rest.
func pausedStream(t *testing.T, release chan struct{}) string {
	t.Helper()
	first := benchStream[:strings.Index(benchStream, "\n\n")+2]
	ln := listen(t)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, first)
		_ = http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, benchStream[len(first):])
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })
	return "http://" + ln.Addr().String() + "/v1"
}

// A stream whose headers left before the drain began runs to its end,
// whole, and the drain (Serve) returns once it is done: with an hour's
// hard timeout, a drain that waited for it would hang the test.
func TestDrainFinishesStreamInFlight(t *testing.T) {
	pol := testPolicy()
	pol.Budget.Deadline, pol.Timeouts.Hard = time.Hour, time.Hour
	release := make(chan struct{})
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", pausedStream(t, release))})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(streamChat))
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	stopped := make(chan struct{})
	go func() { px.stop(); close(stopped) }()
	addr := strings.TrimPrefix(px.url, "http://")
	require.Eventually(t, func() bool {
		d, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = d.Close()
		}
		return err != nil
	}, 5*time.Second, ms, "the drain began")
	close(release)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, benchStream, string(body), "the stream in flight is whole")
	<-stopped
	rs := px.rows.all()
	require.Len(t, rs, 1)
	assert.Equal(t, admit.OK, rs[0].Outcome)
	assert.Equal(t, "succeeded", rs[0].JobEnd)
}

// A client that asks for a big answer and never reads it holds its
// request (and its slot under --max-concurrent) only until one write
// has waited writeStall: then the connection goes.
func TestClientNeverReads(t *testing.T) {
	old := writeStall
	writeStall = 300 * ms
	t.Cleanup(func() { writeStall = old })
	big := strings.Repeat("x", 16<<20) // far more than the sockets' buffers hold
	ln := listen(t)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, big)
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", "http://"+ln.Addr().String()+"/v1")})

	c, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.(*net.TCPConn).SetReadBuffer(4<<10))
	_, err = io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: proxy\r\n\r\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(px.px.sem) == 1 }, 5*time.Second, ms, "the request is in flight")
	require.Eventually(t, func() bool { return len(px.px.sem) == 0 }, 10*time.Second, 10*ms,
		"the request of a client that reads nothing is kept")
}

// An upstream answering a status below 100 ("000", which Go's parser
// takes) is a malformed answer: 502 to the client, and a row.
func TestUpstreamStatusBelow100(t *testing.T) {
	base, _ := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, _, ok := readReq(br); ok {
			_, _ = io.WriteString(c, "HTTP/1.1 000 Zero\r\nContent-Length: 2\r\n\r\n{}")
		}
	})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	resp, _ := post(t, px.url+"/v1/chat/completions", chatBody, headerJob, "zero")
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	rs := px.rows.wait(t, 1)
	assert.Equal(t, admit.ServerError, rs[0].Outcome)
	assert.Equal(t, 0, rs[0].HTTPStatus)
}

// endlessStream is an upstream whose stream answer never ends (until the
// proxy's request does, counted in done).
func endlessStream(t *testing.T) (base string, done chan struct{}) {
	t.Helper()
	done = make(chan struct{}, 1)
	ln := listen(t)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
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
			time.Sleep(ms) // a model's pace
		}
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })
	return "http://" + ln.Addr().String() + "/v1", done
}

// A client that pipelines a request behind a stream and then resets its
// connection: the server reads no more, so only the stream's next write
// can tell that the client is gone. That failed write is the hang-up:
// the attempt is cancelled (its row says so) and the upstream request
// ends, instead of the stream running on for nobody until the hard
// timeout of an hour.
func TestPipelinedClientGoneMidStream(t *testing.T) {
	base, upDone := endlessStream(t)
	pol := testPolicy()
	pol.Budget.Deadline, pol.Timeouts.Hard = time.Hour, time.Hour
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
	nc, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	c := nc.(*net.TCPConn)
	_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nX-Retrygate-Job: piped\r\nContent-Length: "+
		strconv.Itoa(len(streamChat))+"\r\n\r\n"+streamChat+"GET /v1/models HTTP/1.1\r\nHost: proxy\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	_, err = io.ReadFull(resp.Body, make([]byte, 1000))
	require.NoError(t, err)
	require.NoError(t, c.SetLinger(0))
	require.NoError(t, c.Close())
	<-upDone // the upstream request ended
	rs := px.rows.wait(t, 1)
	assert.Equal(t, admit.Cancelled, rs[0].Outcome)
}

// A client that half-closes while its pass-through request waits on the
// upstream is gone: the upstream request is cancelled, and the client
// reads nothing but the close (no made-up 502 "upstream unreachable",
// no empty 200).
func TestPassThroughHangUpNoMadeUpAnswer(t *testing.T) {
	arrived, cancelled := make(chan struct{}, 1), make(chan struct{})
	base, _ := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, _, ok := readReq(br); ok {
			arrived <- struct{}{}
			_, _ = br.ReadByte() // returns when the proxy gives the request up
			close(cancelled)
		}
	})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	nc, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer nc.Close()
	c := nc.(*net.TCPConn)
	_, err = io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: proxy\r\n\r\n")
	require.NoError(t, err)
	<-arrived // the request is upstream: the hang-up cancels it there
	require.NoError(t, c.CloseWrite())
	<-cancelled
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Empty(t, string(got), "no answer, only the close")
}

// eofListener tells when a connection the proxy accepted read its end:
// the server's own read noticing a client's hang-up.
type eofListener struct {
	net.Listener
	once sync.Once
	eof  chan struct{}
}

func (l *eofListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &eofConn{Conn: c, l: l}, nil
}

type eofConn struct {
	net.Conn
	l *eofListener
}

func (c *eofConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err == io.EOF {
		c.l.once.Do(func() { close(c.l.eof) })
	}
	return n, err
}

// What a gateway does not forward: CONNECT (it is not a forward proxy)
// and the HTTP/2 preface, which net/http hands a handler.
func TestNotForwarded(t *testing.T) {
	u := make(chan string, 4)
	base, _ := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if req, _, ok := readReq(br); ok {
			u <- req.Method
		}
	})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	for req, want := range map[string]int{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n": http.StatusMethodNotAllowed,
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n":                                  http.StatusHTTPVersionNotSupported,
	} {
		c, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
		require.NoError(t, err)
		_, err = io.WriteString(c, req)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodGet})
		require.NoError(t, err, req)
		assert.Equal(t, want, resp.StatusCode, req)
		_ = c.Close()
	}
	assert.Empty(t, u, "nothing reached the upstream")
}
