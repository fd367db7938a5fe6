package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/rehearse/seat"
)

// seen is what an upstream got of each request: its request-target and
// headers.
type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (s *seen) all() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.reqs...)
}

// seeingUpstream answers every request with a chat answer and keeps what
// it got.
func seeingUpstream(t *testing.T) (string, *seen) {
	s := &seen{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, r)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, chatAnswer)
	}))
	t.Cleanup(up.Close)
	return up.URL, s
}

// The seat's base_url query (Azure's api-version) goes upstream on every
// request, generations and pass-throughs alike, merged with the
// client's: the seat's keys win, the client's other pairs are kept as
// sent. It is never written to the log. (Before, the proxy sent the
// client's query only.)
func TestSeatQueryThroughProxy(t *testing.T) {
	up, got := seeingUpstream(t)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", up+"/v1?api-version=2024-02-01")})
	for _, tc := range []struct {
		method, target, want string
	}{
		{http.MethodPost, "/v1/chat/completions", "api-version=2024-02-01"},
		{http.MethodPost, "/v1/chat/completions?trace=on&api-version=1999-01-01&api%2Dversion=x", "api-version=2024-02-01&trace=on"},
		{http.MethodGet, "/v1/models?limit=2", "api-version=2024-02-01&limit=2"},
	} {
		req, err := http.NewRequest(tc.method, px.url+tc.target, strings.NewReader(chatBody))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, tc.target)
		reqs := got.all()
		require.NotEmpty(t, reqs)
		last := reqs[len(reqs)-1]
		assert.Equal(t, tc.want, last.URL.RawQuery, tc.target)
		assert.Equal(t, strings.SplitN(tc.target, "?", 2)[0], last.URL.Path)
	}
	px.stop()
	assert.NotContains(t, px.rows.text(), "2024-02-01", "the seat's query is never logged")
}

// A job named twice (X-Retrygate-Job or Idempotency-Key sent twice, or
// with two values) is a 400 naming the header, and nothing goes
// upstream: the proxy does not pick one. (Before, the first was used.)
func TestDuplicateJobHeaders(t *testing.T) {
	up, got := seeingUpstream(t)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", up+"/v1")})
	for name, hs := range map[string][][2]string{
		"X-Retrygate-Job twice": {{headerJob, "a"}, {headerJob, "b"}},
		"X-Retrygate-Job same":  {{headerJob, "a"}, {headerJob, "a"}},
		"two values":            {{headerJob, "a, b"}},
		"Idempotency-Key twice": {{headerIdem, "k1"}, {headerIdem, "k2"}},
		"an empty one and one":  {{headerJob, ""}, {headerJob, "a"}},
	} {
		req, err := http.NewRequest(http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(chatBody))
		require.NoError(t, err)
		for _, h := range hs {
			req.Header.Add(h[0], h[1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, name)
		assert.Equal(t, "invalid_job", resp.Header.Get("X-Retrygate-Refused"), name)
		assert.Contains(t, string(body), hs[0][0], name)
	}
	assert.Empty(t, got.all(), "nothing reached the upstream")
	// One of each: X-Retrygate-Job names the job, as ever.
	resp, _ := post(t, px.url+"/v1/chat/completions", chatBody, headerJob, "a", headerIdem, "k1")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "a", px.done(t, "a")[0].Job)
}

// Expect: 100-continue is the client's and the proxy's business: the
// proxy has read the body before it forwards, so the upstream request
// carries none. (Before, it was forwarded.)
func TestExpectNotForwarded(t *testing.T) {
	up, got := seeingUpstream(t)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", up+"/v1")})
	c, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: "+
		strconv.Itoa(len(chatBody))+"\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 100 Continue\r\n", line)
	_, err = br.ReadString('\n')
	require.NoError(t, err)
	_, err = io.WriteString(c, chatBody)
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	reqs := got.all()
	require.Len(t, reqs, 1)
	assert.Empty(t, reqs[0].Header.Values("Expect"))
}
