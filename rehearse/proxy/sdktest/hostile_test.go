package sdktest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/realtime"
)

// rawOrigin answers every request on 127.0.0.1 with the bytes of write,
// then holds the connection open for stall (0: closes it).
func rawOrigin(t *testing.T, write string, stall time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, write)
				time.Sleep(stall) // the upstream says nothing more
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// What the official OpenAI SDK makes of an upstream that breaks its
// framing behind the proxy matches the row: a 101 is an error, never a
// stream that ends cleanly with nothing; a complete stream whose
// Content-Length is too long reaches the SDK whole at once (it stops at
// data: [DONE]), and its row is ok.
func TestOpenAIHostileUpstream(t *testing.T) {
	ev := "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
	tests := []struct {
		name    string
		write   string
		stall   bool
		content string // "": the SDK returns an error
		outcome admit.Outcome
	}{
		{"101 switching protocols", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", true, "", admit.ServerError},
		{"[DONE] with a Content-Length 100 bytes too long, then a stall",
			fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(ev)+100, ev), true, "hi", admit.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The hard timeout is the real-time allowance (a ceiling load
			// does not reach), and the stall outlasts it: an SDK that waits
			// for the upstream's end waits out the hard timeout.
			pol := policy()
			pol.Timeouts.Hard = realtime.By(500 * ms)
			var stall time.Duration
			if tt.stall {
				stall = pol.Timeouts.Hard + 2*time.Second
			}
			pxURL, log := front(t, "openai", rawOrigin(t, tt.write, stall), pol)
			c := openaiClient(pxURL, 0, nil)
			s := c.Chat.Completions.NewStreaming(context.Background(), openaiParams(true))
			var acc openai.ChatCompletionAccumulator
			began := time.Now()
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if tt.content == "" {
				assert.Error(t, s.Err(), "the SDK must see the failure")
			} else {
				require.NoError(t, s.Err())
				require.Len(t, acc.Choices, 1)
				assert.Equal(t, tt.content, acc.Choices[0].Message.Content)
				assert.Less(t, time.Since(began), pol.Timeouts.Hard, "at once, not after the hard timeout")
			}
			rows := log.wait(t, 1)
			assert.Equal(t, tt.outcome, rows[0].Outcome, log.String())
		})
	}
}
