package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzServerConn sends a client's bytes, whatever they are, on one
// connection, then half-closes it. The server must end the connection
// within its clocks (never hang), never crash, and what it sends back is
// a sequence of whole HTTP/1.x answers and nothing else.
//
//	go test ./rehearse/proxy -run '^$' -fuzz FuzzServerConn -fuzztime 30s
func FuzzServerConn(f *testing.F) {
	setClock(f, &readHeaderTimeout, 300*ms)
	setClock(f, &bodyTimeout, 300*ms)
	setClock(f, &clientIdleTimeout, 300*ms)
	u := wireUpstream(f, nil)
	px := wireProxy(f, u)
	for _, s := range []string{
		wirePost(wireChat("a"), ""),
		wirePost(wireChat("a"), "") + wireGetModels + wirePost(wireChat("b"), "Connection: close\r\n"),
		"POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + wireGetModels,
		"POST /v1/chat/completions HTTP/1.0\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n{}",
		"HEAD /v1/models HTTP/1.1\r\nHost: p\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GARBAGE\r\n\r\n",
		"",
	} {
		f.Add([]byte(s))
	}
	addr := strings.TrimPrefix(px.url, "http://")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		// Closed with a reset once read: tens of thousands of runs leave
		// no TIME_WAIT ports behind to slow the next dials.
		defer c.Close()
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(data); err != nil && !errors.Is(err, net.ErrClosed) {
			// The server may close first (an error answer): fine.
			_ = err
		}
		_ = c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server kept the connection past its clocks; input %q", data)
		}
		if bytes.Contains(bytes.ToUpper(data), []byte("HEAD")) {
			return // an answer to HEAD has no body to frame by
		}
		br := bufio.NewReader(bytes.NewReader(got))
		for {
			if _, err := br.Peek(1); err == io.EOF {
				return
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("not an HTTP answer: %v\nsent %q\ngot %q", err, data, got)
			}
			if resp.StatusCode == http.StatusContinue {
				continue
			}
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				// A stream the proxy cut (the client half-closed: gone)
				// ends short; nothing may follow it.
				if rest, _ := io.ReadAll(br); len(rest) > 0 {
					t.Fatalf("bytes after a cut answer: %q", rest)
				}
				return
			}
		}
	})
}
