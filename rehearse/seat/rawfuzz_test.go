package seat

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// FuzzRawResponse drives the HTTP response state machine with raw bytes
// from a 127.0.0.1 server: whatever it writes (then closing the
// connection, or holding it open), every kind of seat returns by its
// hard timeout with a known outcome, a true elapsed and sane counts.
func FuzzRawResponse(f *testing.F) {
	seeds := []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":{\"prompt_tokens\":9e18,\"completion_tokens\":-3}}\n\ndata: [DONE]\n\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1e12\r\nretry-after-ms: 1e15\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 503 Service Unavailable\r\nRetry-After: Fri, 31 Dec 9999 23:59:59 GMT\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/x-ndjson\r\n\r\n10\r\n{\"done\":true,\"eval_count\":1e300}\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":99999999999999999999999}}\n\n",
		"HTTP/1.1 302 Found\r\nLocation: /\r\n\r\n<",
		"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n\x1f\x8b",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"choices\":[{\"message\":{\"content\":\"x\"}}]}",
	}
	for i, s := range seeds {
		f.Add([]byte(s), uint8(i))
	}
	const hard = 150 * time.Millisecond
	f.Fuzz(func(t *testing.T, raw []byte, mode uint8) {
		hold := mode&1 == 1 // keep the connection open after writing
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Skip(err)
		}
		defer ln.Close()
		done := make(chan struct{})
		accepted := make(chan net.Conn, 1)
		go func() {
			defer close(done)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
			defer c.Close()
			req, err := http.ReadRequest(bufio.NewReader(c))
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			c.Write(raw)
			if hold {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				io.Copy(io.Discard, c) // until the client closes
			}
		}()
		kind := []string{"openai", "anthropic", "ollama"}[int(mode>>1)%3]
		cfg := Config{Name: "f", Kind: kind, BaseURL: "http://" + ln.Addr().String(), Model: "gpt-4o-mini"}
		s, err := NewWithOptions(cfg, Options{Now: func() time.Time { return fixedNow }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), hard)
		defer cancel()
		start := time.Now()
		obs := s.Do(ctx, Request{Prompt: "fuzz", WaitCap: time.Duration(mode>>3) * 10 * time.Millisecond})
		took := time.Since(start)
		if took > hard+cancelSlack+countGrace {
			t.Fatalf("returned after %s (hard timeout %s): %+v", took, hard, obs)
		}
		switch obs.Outcome {
		case admit.OK, admit.ConnError, admit.RateLimited, admit.ClientError, admit.ServerError,
			admit.Timeout, admit.WaitCap, admit.Reset, admit.Cancelled:
		default:
			t.Fatalf("unknown outcome %q", obs.Outcome)
		}
		if obs.Elapsed < 0 || obs.Elapsed > took {
			t.Fatalf("elapsed %s outside [0, %s]", obs.Elapsed, took)
		}
		if obs.HasWait && (obs.Wait < 0 || obs.Wait > obs.Elapsed) {
			t.Fatalf("wait %s outside [0, elapsed %s]", obs.Wait, obs.Elapsed)
		}
		for _, n := range []int64{obs.PromptTokens, obs.CompletionTokens, obs.Tokens()} {
			if n < 0 || n > admit.MaxTokens {
				t.Fatalf("token count %d outside [0, %d]", n, admit.MaxTokens)
			}
		}
		if obs.RetryAfter < 0 || obs.RetryAfter > admit.MaxDuration {
			t.Fatalf("retry-after %s outside [0, %s]", obs.RetryAfter, admit.MaxDuration)
		}
		if obs.Billing != admit.BillingOf(obs.Outcome, obs.Elapsed, 0) {
			t.Fatalf("billing %s for %s", obs.Billing, obs.Outcome)
		}
		cancel()
		ln.Close()
		// A held connection the seat keeps alive (a whole answer) is
		// closed here: the server's side would otherwise wait out its
		// 5 s deadline, and a seed that does so made the baseline run
		// outlast CI's -fuzztime.
		select {
		case c := <-accepted:
			c.Close()
		default:
		}
		<-done
	})
}
