package sdktest

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/retrygate/retrygate/admit"
)

// heldOpen is a provider on 127.0.0.1 that streams a whole answer (its
// last event carries the finish reason and the usage), then holds the
// connection open without [DONE] or message_stop for 5 s; released is
// set when the hold ran out (not when the proxy let go first).
func heldOpen(t *testing.T, kind string) (origin string, released *atomic.Bool) {
	t.Helper()
	released = new(atomic.Bool)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		if kind == "anthropic" {
			_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"usage\":{\"input_tokens\":12,\"output_tokens\":0}}}\n\n"+
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\n"+
				"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"+
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n")
		} else {
			_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"hello"},"finish_reason":null}]}`+"\n\n"+
				`data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"+
				`data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}`+"\n\n")
		}
		_ = http.NewResponseController(w).Flush()
		hold := time.NewTimer(5 * time.Second)
		defer hold.Stop()
		select {
		case <-hold.C:
			released.Store(true)
		case <-r.Context().Done():
		}
	})
	srv := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), released
}

// Both official SDKs' streaming clients read a whole stream whose
// provider holds the connection open after its last event (the finish
// reason and usage, no terminal event): the stream ends for them, whole,
// while the provider still holds it.
func TestWholeStreamHeldOpenThroughSDKs(t *testing.T) {
	pol := policy()
	pol.Budget.Deadline, pol.Timeouts.Hard = 30*time.Second, 20*time.Second // past the hold

	origin, released := heldOpen(t, "openai")
	pxURL, log := front(t, "openai", origin, pol)
	acc := openaiStream(t, openaiClient(pxURL, 0, nil))
	assert.False(t, released.Load(), "the SDK's stream ended before the provider let go")
	assert.Equal(t, "hello", acc.Choices[0].Message.Content)
	assert.Equal(t, "stop", acc.Choices[0].FinishReason)
	assert.EqualValues(t, 1, acc.Usage.CompletionTokens)
	assert.Equal(t, admit.OK, log.wait(t, 1)[0].Outcome)

	origin, released = heldOpen(t, "anthropic")
	pxURL, log = front(t, "anthropic", origin, pol)
	msg := anthropicStream(t, anthropicClient(pxURL, 0, nil))
	assert.False(t, released.Load(), "the SDK's stream ended before the provider let go")
	assert.EqualValues(t, "end_turn", msg.StopReason)
	assert.EqualValues(t, 1, msg.Usage.OutputTokens)
	assert.Equal(t, admit.OK, log.wait(t, 1)[0].Outcome)
}
