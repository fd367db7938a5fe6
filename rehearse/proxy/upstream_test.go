package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
)

const (
	chatBody   = `{"model":"m1","messages":[{"role":"user","content":"hi"}]}`
	chatAnswer = `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`
)

// rawUpstream serves each connection with handle, on 127.0.0.1, and
// counts the connections it took.
func rawUpstream(t *testing.T, handle func(c net.Conn, br *bufio.Reader)) (base string, conns *atomic.Int32) {
	t.Helper()
	ln := listen(t)
	conns = new(atomic.Int32)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c, bufio.NewReader(c))
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/v1", conns
}

// readReq reads one request and its body; ok is false at the
// connection's end.
func readReq(br *bufio.Reader) (*http.Request, string, bool) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, "", false
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, "", false
	}
	return req, string(b), true
}

func answer(extra string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s", len(chatAnswer), extra, chatAnswer)
}

// Kept-alive connections carry request after request: one connection
// for requests one at a time, and bursts of concurrent requests never
// more than the most in flight at once.
func TestUpstreamConnectionsReused(t *testing.T) {
	var mu sync.Mutex
	var heads []string
	base, conns := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, body, ok := readReq(br)
			if !ok {
				return
			}
			mu.Lock()
			heads = append(heads, fmt.Sprintf("%s %s cl=%d body=%t ua=%q job=%q te=%q", req.Method, req.RequestURI, req.ContentLength,
				body == chatBody, req.Header.Get("User-Agent"), req.Header.Get(headerJob), req.Header.Get("Te")))
			mu.Unlock()
			if _, err := io.WriteString(c, answer("")); err != nil {
				return
			}
		}
	})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	// The bursts' client dials spare connections it may never use: a
	// drain waits 5 s for such a connection's first request (net/http's
	// Shutdown), so they go before the proxy stops.
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	for i := range 5 {
		resp, body := post(t, px.url+"/v1/chat/completions", chatBody, "X-Retrygate-Job", fmt.Sprint("j", i), "User-Agent", "app/1", "TE", "trailers")
		require.Equal(t, 200, resp.StatusCode, body)
		assert.Equal(t, chatAnswer, body)
	}
	assert.EqualValues(t, 1, conns.Load(), "one connection for requests one at a time")
	mu.Lock()
	assert.Equal(t, fmt.Sprintf(`POST /v1/chat/completions cl=%d body=true ua="app/1" job="" te=""`, len(chatBody)), heads[0],
		"the client's request as sent, without hop-by-hop headers or the job header")
	mu.Unlock()

	const n = 64 // as bench/compare.sh attacks it
	burst := func() {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				resp, body := post(t, px.url+"/v1/chat/completions", chatBody)
				assert.Equal(t, 200, resp.StatusCode, body)
			})
		}
		wg.Wait()
	}
	for range 3 {
		burst()
	}
	assert.LessOrEqual(t, conns.Load(), int32(1+n), "bursts reuse the kept connections: never more than the most in flight at once")
	rs := px.rows.wait(t, 5+3*n)
	for _, r := range rs {
		assert.Equal(t, admit.OK, r.Outcome)
	}
}

// An origin that closes each connection after its answer (without
// saying so): a request that goes out on a kept-alive connection the
// origin has closed meanwhile (the close races the write; it happened
// one run in four under load) is retried as a conn_error attempt of its
// own, with its row, on a new connection; the client gets every answer.
// One that says Connection: close is not reused at all.
func TestUpstreamIdleClosed(t *testing.T) {
	for _, say := range []bool{false, true} {
		t.Run(fmt.Sprint("says=", say), func(t *testing.T) {
			var requests atomic.Int32
			base, conns := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				if _, _, ok := readReq(br); !ok {
					return
				}
				requests.Add(1)
				extra := ""
				if say {
					extra = "Connection: close\r\n"
				}
				_, _ = io.WriteString(c, answer(extra))
			})
			pol := testPolicy()
			pol.Breaker.FailureRate = 0
			px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
			for i := range 4 {
				resp, body := post(t, px.url+"/v1/chat/completions", chatBody)
				require.Equal(t, 200, resp.StatusCode, "request %d: %s", i, body)
				assert.Equal(t, chatAnswer, body)
			}
			assert.GreaterOrEqual(t, conns.Load(), int32(4))
			px.done(t, "")
			jobs := map[string]int{}
			for _, r := range px.rows.all() {
				jobs[r.Job]++
				if r.Outcome != admit.OK {
					assert.Equal(t, admit.ConnError, r.Outcome, "the connection's failure, not the provider's: %s", r.Note)
					assert.Equal(t, admit.Free, r.Billing)
				}
			}
			assert.Len(t, jobs, 4, "one job a request")
			assert.EqualValues(t, 4, requests.Load(), "each request answered once")
		})
	}
}

// A request written on a kept-alive connection that the origin then
// closes without answering may have reached a server that bills it: it
// is never sent again behind the client's back, inside the transport.
// The policy retries it as an attempt of its own, with its row, on a new
// connection, and the client gets that answer.
func TestUpstreamWrittenRequestNotResent(t *testing.T) {
	var requests atomic.Int32
	base, conns := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, _, ok := readReq(br); !ok {
				return
			}
			if requests.Add(1) == 2 {
				return // read, then the connection closed: no answer
			}
			if _, err := io.WriteString(c, answer("")); err != nil {
				return
			}
		}
	})
	pol := testPolicy()
	pol.Retry.BaseDelay = 10 * ms
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
	resp, body := post(t, px.url+"/v1/chat/completions", chatBody, headerJob, "j1")
	require.Equal(t, 200, resp.StatusCode, body)
	resp, body = post(t, px.url+"/v1/chat/completions", chatBody, headerJob, "j2")
	assert.Equal(t, 200, resp.StatusCode, body)
	assert.EqualValues(t, 3, requests.Load(), "the unanswered request was sent once, then retried as an attempt of its own")
	assert.EqualValues(t, 2, conns.Load(), "the retry on a new connection")
	rs := px.done(t, "j2")
	require.Len(t, rs, 2)
	assert.NotEqual(t, admit.OK, rs[0].Outcome)
	assert.Equal(t, admit.OK, rs[1].Outcome)
	assert.Equal(t, []int{1, 2}, []int{rs[0].Attempt, rs[1].Attempt})
}

// Answers the client must not be handed as they came: informational
// answers before the real one are skipped, and header blocks over the
// bound (net/http's Transport counts the 1xx ones' too) are a 502 and a
// failed row, not a proxy holding 64 KiB per line.
func TestUpstreamOddAnswers(t *testing.T) {
	tests := []struct {
		name    string
		write   string
		status  int
		outcome admit.Outcome
	}{
		{"100 then 200", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + answer(""), 200, admit.OK},
		{"1xx headers over 64 KiB", strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </"+strings.Repeat("x", 1<<10)+">\r\n\r\n", 70) + answer(""), 502, admit.ServerError},
		{"headers over 64 KiB", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n" + answer("")[len("HTTP/1.1 200 OK\r\n"):], 502, admit.ServerError},
		{"not http", "SSH-2.0-OpenSSH\r\n\r\n", 502, admit.ServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, _ := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				if _, _, ok := readReq(br); ok {
					_, _ = io.WriteString(c, tt.write)
				}
			})
			px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
			resp, body := post(t, px.url+"/v1/chat/completions", chatBody)
			assert.Equal(t, tt.status, resp.StatusCode, body)
			if tt.status == 200 {
				assert.Equal(t, chatAnswer, body)
			}
			rs := px.rows.wait(t, 1)
			assert.Equal(t, tt.outcome, rs[0].Outcome)
		})
	}
}

// An https origin: the proxy speaks TLS to it (HTTP/1.1 by ALPN) and
// keeps the connection alive across requests.
func TestUpstreamTLS(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(nil)
	srv.EnableHTTP2 = true // offered; the proxy asks for http/1.1
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	var proto atomic.Value
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Proto)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, chatAnswer)
	})
	srv.StartTLS()
	t.Cleanup(srv.Close)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", srv.URL+"/v1")})
	px.px.seats[0].rt.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	for range 3 {
		resp, body := post(t, px.url+"/v1/chat/completions", chatBody)
		require.Equal(t, 200, resp.StatusCode, body)
		assert.Equal(t, chatAnswer, body)
	}
	assert.Equal(t, "HTTP/1.1", proto.Load())
	assert.EqualValues(t, 1, conns.Load())
	for _, r := range px.rows.wait(t, 3) {
		assert.Equal(t, admit.OK, r.Outcome)
	}

	// An origin whose certificate the proxy does not trust is never sent
	// the request.
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a request reached an untrusted origin")
	}))
	t.Cleanup(other.Close)
	px2 := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", other.URL+"/v1")})
	resp, body := post(t, px2.url+"/v1/chat/completions", chatBody)
	assert.Equal(t, 502, resp.StatusCode, body)
	assert.Contains(t, body, "tls handshake failed")
}

func TestNewOriginRefuses(t *testing.T) {
	for _, base := range []string{"ftp://h/v1", "http:///v1", "https://bücher.example/v1"} {
		_, err := New(Options{Policy: testPolicy(), Chain: []seat.Config{seatCfg("s", "openai", base)}})
		assert.ErrorContains(t, err, "seats.s.base_url", base)
	}
}

// A stream whose framing breaks (a malformed chunk), mid-way or after
// its last event, reaches the client as a broken stream, never as one
// that ended cleanly.
func TestUpstreamMalformedChunk(t *testing.T) {
	ev := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
	for _, tail := range []string{"", "data: [DONE]\n\n"} {
		t.Run(fmt.Sprint("done=", tail != ""), func(t *testing.T) {
			base, _ := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				if _, _, ok := readReq(br); !ok {
					return
				}
				body := ev + tail
				_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(body), body)
				time.Sleep(20 * ms) // the break comes in a later packet
				_, _ = io.WriteString(c, "zz-not-a-size\r\n")
			})
			px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
			req, err := http.NewRequest(http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(openaiStream))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode)
			got, err := io.ReadAll(resp.Body)
			assert.Error(t, err, "a broken stream must not look complete")
			assert.Equal(t, ev+tail, string(got))
			px.rows.wait(t, 1)
		})
	}
}

// An answer the client gets matches its row, whatever the upstream does
// to its framing. Before the answer's headers have left (a stream's
// leave at once; an answer of known length's with its first byte), a
// 1xx other than 100 and 103, a header block and nothing more, or a
// first read that breaks is the proxy's 502 in the provider's shape;
// after them, a body that ends short, is malformed, or stalls to the
// hard timeout (even past a complete [DONE]) is a dropped connection.
// The row says what happened, timed to the cut, never ok.
func TestUpstreamAnswerMatchesRow(t *testing.T) {
	ev := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
	sse := func(framing, body string) string {
		return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + framing + "\r\n" + body
	}
	tests := []struct {
		name    string
		write   string
		stall   bool // hold the connection open after writing (else close it)
		status  int  // 0: headers came, then the connection dropped
		outcome admit.Outcome
	}{
		{"101 switching protocols", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", true, 502, admit.ServerError},
		{"102 processing", "HTTP/1.1 102 Processing\r\n\r\n" + answer(""), false, 502, admit.ServerError},
		{"199 then 200", "HTTP/1.1 199 Whatever\r\n\r\n" + answer(""), false, 502, admit.ServerError},
		{"headers only, length 100", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", false, 502, admit.Reset},
		{"headers only, length 100, stall", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", true, 504, admit.Timeout},
		{"[DONE], length 100 too long, stall", sse(fmt.Sprintf("Content-Length: %d\r\n", len(ev)+100), ev), true, 0, admit.Timeout},
		{"[DONE], length 100 too long, close", sse(fmt.Sprintf("Content-Length: %d\r\n", len(ev)+100), ev), false, 0, admit.Reset},
		{"[DONE], chunked without its last chunk, close", sse("Transfer-Encoding: chunked\r\n", fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev)), false, 0, admit.Reset},
		{"[DONE], chunked without its last chunk, stall", sse("Transfer-Encoding: chunked\r\n", fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev)), true, 0, admit.Timeout},
		{"[DONE], chunked, then a malformed chunk", sse("Transfer-Encoding: chunked\r\n", fmt.Sprintf("%x\r\n%s\r\nzz\r\n", len(ev), ev)), true, 0, admit.Reset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, _ := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				if _, _, ok := readReq(br); !ok {
					return
				}
				_, _ = io.WriteString(c, tt.write)
				if tt.stall {
					_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
					_, _ = io.Copy(io.Discard, c) // until the proxy gives up on it
				}
			})
			pol := testPolicy()
			pol.Timeouts.Hard = 500 * ms
			pol.Budget.MaxAttempts = 1 // one attempt: its answer is the client's
			px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
			req, err := http.NewRequest(http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(openaiStream))
			require.NoError(t, err)
			req.Header.Set(headerJob, "j")
			began := time.Now()
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
			require.NoError(t, err, "an answer, not a closed connection")
			got, readErr := io.ReadAll(resp.Body)
			resp.Body.Close()
			took := time.Since(began)
			if tt.status != 0 {
				assert.Equal(t, tt.status, resp.StatusCode, string(got))
				assert.Equal(t, "attempt_cap", resp.Header.Get("X-Retrygate-Refused"))
				assert.Contains(t, string(got), `{"error":{"code":"attempt_cap","message":"retrygate: refuse: attempt cap for job j: the job used 1 of 1 attempts; its last attempt: `, "the provider's error shape")
				assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
				assert.NoError(t, readErr)
			} else {
				assert.Equal(t, 200, resp.StatusCode)
				assert.Error(t, readErr, "a cut answer must not look complete")
				assert.Equal(t, ev, string(got), "what came before the cut")
			}
			rs := px.done(t, "j")
			require.Len(t, rs, 2, "the attempt, and the refusal that ends the job")
			assert.Equal(t, tt.outcome, rs[0].Outcome, px.rows.text())
			assert.LessOrEqual(t, rs[0].Elapsed, took+10*ms, "the row's elapsed is within what the client waited")
			if tt.outcome == admit.Timeout {
				assert.GreaterOrEqual(t, rs[0].Elapsed, pol.Timeouts.Hard-10*ms, "timed to the cut")
				assert.GreaterOrEqual(t, took, pol.Timeouts.Hard)
				assert.Equal(t, admit.Ambiguous, rs[0].Billing)
			}
			assert.NotEqual(t, ledgerfile.JobSucceeded, rs[0].JobEnd)
		})
	}
}

// An answer whose end comes as the hard timeout fires is judged once:
// the client gets what its row says, the whole answer when the row is ok
// and a cut one when it is not. Here the seat has read the stream to its
// end and is still counting a 1 MB prompt (the answer has no usage) when
// its hard timeout fires: that clock, whose cut comes from its own
// goroutine, must not cut an answer already judged whole.
func TestAnswerEndingAtHardTimeoutMatchesRow(t *testing.T) {
	const hard = 50 * ms
	ev := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
	ln := listen(t)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		end, _ := time.ParseDuration(r.Header.Get("X-Test-End"))
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush() // a stream: its headers at once
		time.Sleep(end)                           // a model's time to answer
		_, _ = io.WriteString(w, ev)              // the answer and its end in one segment
	})}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })
	pol := testPolicy()
	pol.Timeouts.Hard = hard
	pol.Breaker = admit.BreakerConfig{} // every request is sent
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", "http://"+ln.Addr().String()+"/v1")})

	body := fmt.Sprintf(`{"model":"m1","stream":true,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("many words ", 100_000))
	type got struct {
		end   time.Duration
		whole bool
		why   string
	}
	clients := map[string]got{}
	for end := time.Duration(0); end < hard; end += 10 * ms {
		job := fmt.Sprintf("j%d", end/time.Millisecond)
		text, err := postErr(px.url+"/v1/chat/completions", body, headerJob, job, "X-Test-End", end.String())
		clients[job] = got{end: end, whole: err == nil && strings.HasSuffix(text, "data: [DONE]\n\n"), why: fmt.Sprint(err)}
	}
	px.stop()
	first := map[string]bool{}
	for _, r := range px.rows.all() {
		c, ok := clients[r.Job]
		if !ok || first[r.Job] {
			continue // a job's later row is the one that ends it at the proxy's stop
		}
		first[r.Job] = true
		assert.Equal(t, r.Outcome == admit.OK, c.whole, "job %s, the answer's end at %s: the row says %s %s (%s), the client read %v (%s)",
			r.Job, c.end, r.Decision, r.Outcome, r.Note, c.whole, c.why)
	}
	assert.Len(t, first, len(clients), "a row for each request")
}

// postErr is post that reports how the client's read of the answer
// ended rather than failing on it.
func postErr(url, body string, kv ...string) (string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("http %d", resp.StatusCode)
	}
	return string(b), err
}
