package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// fromListener is a listener on 127.0.0.1 whose connections come from
// the address each names in a first line, "FROM <ip>\n", before its
// request: real HTTP on loopback from clients of addresses a test cannot
// bind (four hosts, an IPv6 /64).
type fromListener struct{ net.Listener }

type fromConn struct {
	net.Conn
	from net.Addr
}

func (c fromConn) RemoteAddr() net.Addr { return c.from }

func (l fromListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var line []byte
		b := make([]byte, 1)
		for len(line) < 64 {
			if _, err := c.Read(b); err != nil || b[0] == '\n' {
				break
			}
			line = append(line, b[0])
		}
		_ = c.SetReadDeadline(time.Time{})
		ip, ok := strings.CutPrefix(string(line), "FROM ")
		a, err := netip.ParseAddr(ip)
		if !ok || err != nil {
			_ = c.Close()
			continue
		}
		return fromConn{Conn: c, from: net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, 40000))}, nil
	}
}

// startFrom is start on a fromListener.
func startFrom(t *testing.T, up string, tweak func(*Options)) *running {
	t.Helper()
	return startOn(t, fromListener{listen(t)}, testPolicy(), []seat.Config{seatCfg("s", "openai", up+"/v1")}, tweak)
}

// dialFrom opens a connection to the proxy at url as a client at ip.
func dialFrom(t *testing.T, url, ip string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = io.WriteString(c, "FROM "+ip+"\n")
	require.NoError(t, err)
	return c
}

// clientFrom is an HTTP client whose connections come from ip.
func clientFrom(ip string) *http.Client {
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if _, err := io.WriteString(c, "FROM "+ip+"\n"); err != nil {
			_ = c.Close()
			return nil, err
		}
		return c, nil
	}}
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// jobFrom sends one chat request of job id ("": none) as a client at ip.
func jobFrom(t *testing.T, url, ip, id string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatBody))
	require.NoError(t, err)
	if id != "" {
		req.Header.Set(headerJob, id)
	}
	c := clientFrom(ip)
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

func chatUpstream(t *testing.T) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, chatAnswer)
	}))
	t.Cleanup(up.Close)
	return up.URL
}

func TestClientKey(t *testing.T) {
	for _, tc := range []struct {
		remote string
		v4, v6 int
		want   string
	}{
		{"10.0.0.1:5000", 32, 64, "10.0.0.1/32"},
		{"10.0.0.1:5000", 24, 64, "10.0.0.0/24"},
		{"[::ffff:10.0.0.1]:5000", 32, 64, "10.0.0.1/32"}, // v4-mapped is v4
		{"[2001:db8::1]:5000", 32, 64, "2001:db8::/64"},
		{"[2001:db8::ffff:ffff:ffff:ffff]:5000", 32, 64, "2001:db8::/64"},
		{"[2001:db8:0:1::1]:5000", 32, 64, "2001:db8:0:1::/64"},
		{"[fe80::1%eth0]:5000", 32, 64, "fe80::/64"},
		{"[2001:db8::1]:5000", 32, 128, "2001:db8::1/128"},
		{"[2001:db8::1]:5000", 32, 48, "2001:db8::/48"},
		{"pipe", 32, 64, "pipe"}, // no IP: its own client
	} {
		assert.Equal(t, tc.want, clientKey(tc.remote, tc.v4, tc.v6), "%s /%d /%d", tc.remote, tc.v4, tc.v6)
	}
}

// One client's slow bodies hold no more than its share of the request
// slots (a quarter of --max-concurrent): past it each gets 429
// client_busy at once, its body unread, with a row; a client at another
// address is served meanwhile. (Before, they held every slot and every
// other client got 503 busy until the body clock let them go.)
func TestSlotShare(t *testing.T) {
	px := startFrom(t, chatUpstream(t), func(o *Options) { o.MaxConcurrent = 8 })
	const attacker, share, conns = "10.9.9.9", 2, 10
	type answer struct {
		code, refused string
	}
	answers := make(chan answer, conns)
	for range conns {
		c := dialFrom(t, px.url, attacker)
		// A body declared and never sent: it holds its slot until the
		// body clock (30 s) runs out.
		_, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		require.NoError(t, err)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return // held, then closed by the test
			}
			answers <- answer{fmt.Sprint(resp.StatusCode), resp.Header.Get("X-Retrygate-Refused")}
		}()
	}
	for range conns - share {
		select {
		case a := <-answers:
			assert.Equal(t, answer{"429", "client_busy"}, a)
		case <-time.After(10 * time.Second):
			t.Fatal("a request past the client's share was not answered at once")
		}
	}
	resp := jobFrom(t, px.url, "10.1.1.1", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "another client is served: %s", resp.Header.Get("X-Retrygate-Refused"))
	assert.Empty(t, answers, "the share's requests wait for their bodies")

	rows := px.rows.wait(t, conns-share+1)
	busy := 0
	for _, r := range rows {
		if strings.Contains(ledgerfile.FormatRow(&r), "refused=client_busy") {
			busy++
			assert.Equal(t, "refuse: proxy busy", string(r.Decision))
		}
	}
	assert.Equal(t, conns-share, busy, "a row for each refusal")
}

// Four clients, each within its share (a quarter of --max-jobs), fill
// the job table; a fifth client's new job still gets in, in the place of
// the oldest job no request is running of a client holding the most,
// and requests naming no job leave the table as they end, however many.
// (Before, the fifth got 503 busy until the first job's retention ran
// out.)
func TestJobTableUnderFourAddresses(t *testing.T) {
	px := startFrom(t, chatUpstream(t), func(o *Options) { o.MaxJobs = 8 })
	for c := 1; c <= 4; c++ {
		ip := fmt.Sprintf("10.0.0.%d", c)
		for k := range 2 {
			require.Equal(t, http.StatusOK, jobFrom(t, px.url, ip, fmt.Sprintf("j-%d-%d", c, k)).StatusCode)
		}
		resp := jobFrom(t, px.url, ip, fmt.Sprintf("j-%d-more", c))
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "past its share")
		assert.Equal(t, "client_jobs", resp.Header.Get("X-Retrygate-Refused"))
		assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	}
	resp := jobFrom(t, px.url, "10.0.0.5", "newcomer")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a fifth client's job: %s", resp.Header.Get("X-Retrygate-Refused"))
	for range 20 {
		resp := jobFrom(t, px.url, "10.0.0.5", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "one-shot jobs leave the table: %s", resp.Header.Get("X-Retrygate-Refused"))
	}
	px.px.mu.Lock()
	open := len(px.px.jobs)
	px.px.mu.Unlock()
	assert.Equal(t, 8, open, "the table holds its named jobs only")
}

// The share keys on the address's prefix: one IPv6 host (a /64, 2^64
// addresses) is one client whichever of its addresses it sends from,
// and so are IPv4 addresses under a shorter --client-prefix-v4. Another
// prefix is another client. (Before, each address was a client: one
// host filled the table.)
func TestJobTableUnderAPrefix(t *testing.T) {
	for _, tc := range []struct {
		name        string
		v4          int
		host, other func(k int) string
	}{
		{"ipv6 /64", 0, func(k int) string { return fmt.Sprintf("2001:db8::%x", k+1) },
			func(k int) string { return fmt.Sprintf("2001:db8:0:1::%x", k+1) }},
		{"ipv4 /24", 24, func(k int) string { return fmt.Sprintf("10.0.7.%d", k+1) },
			func(k int) string { return fmt.Sprintf("10.0.8.%d", k+1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			px := startFrom(t, chatUpstream(t), func(o *Options) { o.MaxJobs, o.ClientPrefixV4 = 8, tc.v4 })
			for k := range 8 {
				resp := jobFrom(t, px.url, tc.host(k), fmt.Sprintf("h-%d", k))
				if k < 2 {
					require.Equal(t, http.StatusOK, resp.StatusCode, "job %d", k)
					continue
				}
				require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "job %d from another address of the same prefix", k)
				assert.Equal(t, "client_jobs", resp.Header.Get("X-Retrygate-Refused"))
			}
			for k := range 2 {
				assert.Equal(t, http.StatusOK, jobFrom(t, px.url, tc.other(k), fmt.Sprintf("o-%d", k)).StatusCode, "another prefix")
			}
		})
	}
}

// A client that hangs up while its body is being read gives back its
// request slot (and its share of them): hang-ups cannot use up the
// proxy. (Before, each such request kept its slot for good, and a drain
// waited on it forever.)
func TestHungUpBodyGivesBackItsSlot(t *testing.T) {
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", chatUpstream(t)+"/v1")}, func(o *Options) {
		o.MaxConcurrent, o.MaxClientConcurrent = 2, 2
	})
	for k := range 5 {
		c, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
		require.NoError(t, err)
		_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(px.px.sem) == 1 }, 5*time.Second, time.Millisecond, "hang-up %d: its request holds a slot", k)
		require.NoError(t, c.Close())
		require.Eventually(t, func() bool { return len(px.px.sem) == 0 }, 5*time.Second, time.Millisecond, "hang-up %d: its slot given back", k)
	}
	resp, body := post(t, px.url+"/v1/chat/completions", chatBody)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Eventually(t, func() bool {
		px.px.shares.mu.Lock()
		defer px.px.shares.mu.Unlock()
		return len(px.px.shares.held) == 0
	}, 5*time.Second, time.Millisecond, "no share held once the requests end")
}

// In a full table, a newcomer takes the place of the oldest job no
// request is running of the client holding the most: jobs in flight are
// never forgotten, and the giver keeps as many as the newcomer.
func TestFullTableTakesTheOldestIdleJob(t *testing.T) {
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", chatUpstream(t)+"/v1")}, func(o *Options) {
		o.MaxJobs, o.MaxClientJobs = 4, 4
	})
	p := px.px
	for k := range 4 {
		require.Equal(t, http.StatusOK, jobRequest(p, "10.0.0.1", fmt.Sprintf("a-%d", k)).Code)
	}
	p.mu.Lock()
	p.jobs["a-0"].users++ // two requests in flight
	p.jobs["a-1"].users++
	p.mu.Unlock()
	open := func() []string {
		p.mu.Lock()
		defer p.mu.Unlock()
		var ids []string
		for id := range p.jobs {
			ids = append(ids, id)
		}
		return ids
	}
	require.Equal(t, http.StatusOK, jobRequest(p, "10.0.0.2", "b-0").Code)
	assert.ElementsMatch(t, []string{"a-0", "a-1", "a-3", "b-0"}, open(), "a-2 was the oldest idle")
	require.Equal(t, http.StatusOK, jobRequest(p, "10.0.0.2", "b-1").Code)
	assert.ElementsMatch(t, []string{"a-0", "a-1", "b-0", "b-1"}, open())
	w := jobRequest(p, "10.0.0.2", "b-2")
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "as many as the other client: its part of the table")
	assert.Equal(t, "client_jobs", w.Header().Get("X-Retrygate-Refused"))
	p.mu.Lock()
	assert.Equal(t, []*job{p.jobs["a-0"], p.jobs["a-1"]}, p.clients["10.0.0.1/32"].named, "the giver's list kept in order, without the jobs gone")
	for _, id := range []string{"a-0", "a-1"} {
		p.jobs[id].users--
	}
	p.mu.Unlock()
	assert.Equal(t, http.StatusOK, jobRequest(p, "10.0.0.1", "a-0").Code, "a job still open is served")
	// A job forgotten early is not started again under its name, even
	// when the table has room again: its attempt 1 would be a second row
	// for (a-2, 1), and a reader refuses such a log.
	px.clock.Advance(11 * time.Minute) // past every job's deadline and retention
	p.Sweep()
	w = jobRequest(p, "10.0.0.1", "a-2")
	assert.Equal(t, http.StatusGone, w.Code, w.Body.String())
	assert.Equal(t, "job_forgotten", w.Header().Get("X-Retrygate-Refused"))
	assert.Equal(t, "false", w.Header().Get("X-Should-Retry"))
	px.stop()
	var log strings.Builder
	for _, r := range px.rows.all() {
		log.WriteString(ledgerfile.FormatRow(&r) + "\n")
	}
	_, _, err := ledgerfile.ReadAll(strings.NewReader(log.String()), "proxy.log")
	assert.NoError(t, err, "the log reads: one row for each (job, attempt)")
}

// One client's large bodies hold no more than its part of the body
// budget (its part of the slots, and one largest body at least): past it
// each gets 429 client_bodies at once, its body unread, and another
// client's body still finds room. (Before, one client's declared bodies
// held the whole budget, and every other body waited, then got 503.)
func TestBodyShare(t *testing.T) {
	const size = 256 << 10
	px := startFrom(t, chatUpstream(t), func(o *Options) {
		o.MaxBody = size + 1<<10
		o.MaxBodyTotal = 4 * (size + 1<<10)            // four bodies at once
		o.MaxConcurrent, o.MaxClientConcurrent = 16, 4 // a client's part: a quarter, one body
	})
	answers := make(chan string, 4)
	for range 4 {
		c := dialFrom(t, px.url, "10.9.9.9")
		_, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", size)
		require.NoError(t, err)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return // held, then closed by the test
			}
			answers <- fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("X-Retrygate-Refused"))
		}()
	}
	for range 3 {
		select {
		case a := <-answers:
			assert.Equal(t, "429 client_bodies", a)
		case <-time.After(10 * time.Second):
			t.Fatal("a body past the client's part of the budget was not refused at once")
		}
	}
	req, err := http.NewRequest(http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(bigBody(size-100)))
	require.NoError(t, err)
	c := clientFrom("10.1.1.1")
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "another client's body finds room: %s", resp.Header.Get("X-Retrygate-Refused"))
}
