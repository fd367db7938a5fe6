package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// bigBody is a chat request of about n bytes.
func bigBody(n int) string {
	return `{"model":"m1","messages":[{"role":"user","content":"` + strings.Repeat("x", n) + `"}]}`
}

// Many concurrent large bodies: the bytes held at once never pass
// --max-body-total; the requests past it wait, then get 503 with
// Retry-After and a row, never a buffered body. Bodies of unknown length
// (chunked) take the most they may be, then give back what they did not
// use.
func TestBodyBudgetBounds(t *testing.T) {
	defer func(d time.Duration) { bodyWait = d }(bodyWait)
	bodyWait = 50 * ms
	const size, n = 256 << 10, 24
	base, _ := upstreamAt(t, seatserver.OpenAI, seat.Plan{TTFB: 100 * ms, Wait: 120 * ms, Elapsed: 150 * ms, CompletionTokens: 3})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) {
		o.MaxBody = size + 1<<10
		o.MaxBodyTotal = 4 * (size + 1<<10)          // four bodies at once
		o.MaxClientConcurrent = DefaultMaxConcurrent // one client: its share is every slot and byte
	})
	body := bigBody(size)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var rd io.Reader = strings.NewReader(body)
			if i%2 == 1 {
				rd = io.MultiReader(rd) // no length: sent chunked
			}
			req, _ := http.NewRequest(http.MethodPost, px.url+"/v1/chat/completions", rd)
			resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
			if !assert.NoError(t, err) {
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 503 {
				assert.Equal(t, "bodies_busy", resp.Header.Get("X-Retrygate-Refused"), string(b))
				assert.Equal(t, "1", resp.Header.Get("Retry-After"))
				assert.Contains(t, string(b), "--max-body-total")
			}
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	peak := px.px.bodies.peak.Load()
	assert.LessOrEqual(t, peak, px.px.opts.MaxBodyTotal, "bytes held at once")
	assert.Greater(t, peak, int64(size), "bodies were held at once")
	assert.Zero(t, px.px.bodies.held.Load(), "every body's room given back")
	assert.Positive(t, codes[200], "%v", codes)
	assert.Positive(t, codes[503], "%v: the budget turned some away", codes)
	assert.Equal(t, n, codes[200]+codes[503], "%v", codes)
	rs := px.rows.wait(t, n)
	refused := 0
	for _, r := range rs {
		if r.Unsent {
			refused++
			assert.Equal(t, "refuse: proxy busy", r.Decision)
			assert.Equal(t, "bodies_busy", extra(r, KeyRefused))
		}
	}
	assert.Equal(t, codes[503], refused, "a row for every 503")
}

// The request slot is taken before the body is read: past
// --max-concurrent a request is refused at once, though its body never
// comes.
func TestSlotBeforeBody(t *testing.T) {
	base, srv := upstreamAt(t, seatserver.OpenAI, seat.Plan{TTFB: 5 * ms, Wait: 300 * ms, Elapsed: 400 * ms, CompletionTokens: 5})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) {
		o.MaxConcurrent, o.MaxClientConcurrent = 1, 1 // one client: its share is every slot
	})
	slow := make(chan struct{})
	go func() {
		defer close(slow)
		post(t, px.url+"/v1/chat/completions", kinds[0].body)
	}()
	require.Eventually(t, func() bool { return len(srv.Requests()) == 1 }, 2*time.Second, time.Millisecond)
	c, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer c.Close()
	// The headers of a 1 MB body, and not a byte of it.
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(2*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err, "answered before its body came")
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, "busy", resp.Header.Get("X-Retrygate-Refused"))
	<-slow
}

// Past --max-conns connections, a new one is not served until one
// closes (it waits in the backlog, holding no memory of the proxy's).
func TestMaxConns(t *testing.T) {
	base, _ := upstreamAt(t, seatserver.OpenAI, okPlan)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) { o.MaxConns = 2 })
	addr := strings.TrimPrefix(px.url, "http://")
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		idle = append(idle, c)
	}
	got := make(chan int, 1)
	go func() {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post(px.url+"/v1/chat/completions", "application/json", strings.NewReader(kinds[0].body))
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	select {
	case code := <-got:
		t.Fatalf("a third connection was served (%d) while two were open", code)
	case <-time.After(300 * ms):
	}
	idle[0].Close()
	select {
	case code := <-got:
		assert.Equal(t, 200, code)
	case <-time.After(5 * time.Second):
		t.Fatal("the third connection was not served once one closed")
	}
	idle[1].Close()
}

// Every request the proxy answers itself before any job's books has a
// row: a job of its own, not sent, its decision the refusal's reason,
// refused= the answer's X-Retrygate-Refused, for_job the job it named.
// report counts them as refusals (unsent rows), and check's replay of
// them under the policy flips none.
func TestLimitRows(t *testing.T) {
	defer func(d time.Duration) { bodyTimeout = d }(bodyTimeout)
	bodyTimeout = 200 * ms
	base, srv := upstreamAt(t, seatserver.OpenAI, seat.Plan{TTFB: 5 * ms, Wait: 300 * ms, Elapsed: 400 * ms, CompletionTokens: 5})
	pol := testPolicy()
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) {
		o.MaxBody = 1 << 10
		o.MaxConcurrent, o.MaxClientConcurrent = 2, 2 // one client: its share is every slot
	})
	url := px.url + "/v1/chat/completions"
	type want struct {
		status int
		code   string
		reason admit.Reason
		job    string
	}
	var wants []want
	check := func(resp *http.Response, body string, w want) {
		t.Helper()
		assert.Equal(t, w.status, resp.StatusCode, body)
		assert.Equal(t, w.code, resp.Header.Get("X-Retrygate-Refused"))
		assert.Contains(t, body, `"error":{`, "the provider's error shape")
		wants = append(wants, w)
	}
	resp, body := post(t, url, bigBody(2<<10), headerJob, "big")
	check(resp, body, want{413, "request_too_large", admit.ReasonTooLarge, "big"})
	req, _ := http.NewRequest(http.MethodPost, url, io.MultiReader(strings.NewReader(bigBody(2<<10)))) // chunked: found while reading
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	check(resp, string(b), want{413, "request_too_large", admit.ReasonTooLarge, ""})
	resp, body = post(t, url, `[1,2]`, headerJob, "notjson", "X-Stainless-Retry-Count", "1")
	check(resp, body, want{400, "invalid_json", admit.ReasonBadRequest, "notjson"})
	resp, body = post(t, url, kinds[0].body, headerJob, strings.Repeat("j", 200))
	check(resp, body, want{400, "invalid_job", admit.ReasonBadRequest, ""})

	// A body slower than the body clock.
	c, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	require.NoError(t, err)
	hr, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	hb, _ := io.ReadAll(hr.Body)
	c.Close()
	check(hr, string(hb), want{408, "request_timeout", admit.ReasonBadRequest, ""})

	// Past --max-concurrent.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { post(t, url, kinds[0].body) })
	}
	require.Eventually(t, func() bool { return len(srv.Requests()) == 2 }, 2*time.Second, time.Millisecond)
	resp, body = post(t, url, kinds[0].body, headerJob, "crowded")
	check(resp, body, want{503, "busy", admit.ReasonProxyBusy, "crowded"})
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	wg.Wait()

	rs := px.rows.wait(t, len(wants)+2)
	var limit []ledgerfile.Row
	for _, r := range rs {
		if r.Unsent {
			limit = append(limit, r)
		}
	}
	require.Len(t, limit, len(wants))
	ids := map[string]bool{}
	for _, r := range limit {
		var w want
		for _, x := range wants {
			if x.code == extra(r, KeyRefused) && x.job == extra(r, KeyForJob) {
				w = x
			}
		}
		require.NotZero(t, w.status, "a row for no answer: %s", ledgerfile.FormatRow(&r))
		assert.Equal(t, "refuse: "+string(w.reason), r.Decision)
		assert.Equal(t, ledgerfile.JobFailed, r.JobEnd)
		assert.Equal(t, 1, r.Attempt)
		assert.Contains(t, r.Note, fmt.Sprintf("answered %d", w.status))
		assert.True(t, strings.HasPrefix(r.Job, "p7-"), "the proxy's own id: %s", r.Job)
		assert.False(t, ids[r.Job], "each a job of its own")
		ids[r.Job] = true
		if w.code == "invalid_json" {
			assert.Equal(t, "1", extra(r, KeyClientRetry))
		}
	}

	// The log as report and check read it.
	var log bytes.Buffer
	for _, r := range rs {
		log.WriteString(ledgerfile.FormatRow(&r) + "\n")
	}
	all := readAsReport(t, pol, log.String())
	assert.EqualValues(t, len(limit), all.Refused)
	assert.EqualValues(t, 2, all.Refusals[string(admit.ReasonTooLarge)])
	assert.EqualValues(t, 3, all.Refusals[string(admit.ReasonBadRequest)])
	assert.EqualValues(t, 1, all.Refusals[string(admit.ReasonProxyBusy)])
}

// A request-target net/http cannot parse (a control byte) gets
// net/http's own 400 before the handler: no row can be written for it.
func TestBadRequestTarget(t *testing.T) {
	base, _ := upstreamAt(t, seatserver.OpenAI, okPlan)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	c, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GET /\x01x HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	assert.Equal(t, 400, resp.StatusCode)
}
