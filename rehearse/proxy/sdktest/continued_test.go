package sdktest

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/proxy"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// cutThenPrefill is a provider on 127.0.0.1 that streams "hello " and
// drops the connection, unless the request ends in an assistant message
// (a prefill), which it goes on from with "world" and a whole end.
func cutThenPrefill(t *testing.T, kind string) string {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		prefill := len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == "assistant"
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		rc := http.NewResponseController(w)
		switch {
		case kind == "anthropic" && !prefill:
			_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"usage\":{\"input_tokens\":12,\"output_tokens\":0}}}\n\n"+
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello \"}}\n\n")
		case kind == "anthropic":
			_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m2\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"usage\":{\"input_tokens\":14,\"output_tokens\":0}}}\n\n"+
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" world\"}}\n\n"+
				"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"+
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n"+
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
			return
		case !prefill:
			_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n"+
				`data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"hello "},"finish_reason":null}]}`+"\n\n")
		default:
			_, _ = io.WriteString(w, `data: {"id":"c2","object":"chat.completion.chunk","model":"other","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n"+
				`data: {"id":"c2","object":"chat.completion.chunk","model":"other","choices":[{"index":0,"delta":{"content":"world"},"finish_reason":null}]}`+"\n\n"+
				`data: {"id":"c2","object":"chat.completion.chunk","model":"other","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"+
				`data: {"id":"c2","object":"chat.completion.chunk","model":"other","choices":[],"usage":{"prompt_tokens":14,"completion_tokens":1,"total_tokens":15}}`+"\n\n"+
				"data: [DONE]\n\n")
			return
		}
		_ = rc.Flush()
		if c, _, err := rc.Hijack(); err == nil {
			_ = c.Close() // cut after the content: no finish, no end of body
		}
	})
	srv := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// frontPrefill runs the proxy over a chain of two seats on origin: the
// first takes no prefill, the second does.
func frontPrefill(t *testing.T, kind, origin string) (string, *rowLog) {
	t.Helper()
	log := &rowLog{}
	model := "gpt-4o-mini"
	if kind == "anthropic" {
		model = "claude-sonnet-4-5"
	}
	px, err := proxy.New(proxy.Options{
		Policy: policy(), Run: 1, Sink: log.add,
		Chain: []seat.Config{
			{Name: "first", Kind: kind, BaseURL: origin + "/v1", Model: model},
			{Name: "cont", Kind: kind, BaseURL: origin + "/v1", Model: model, Prefill: true},
		},
	})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = px.Serve(ctx, ln, io.Discard); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String(), log
}

// Both official SDKs' streaming clients read a stream cut after its
// content and continued on a seat that takes a prefill as one answer:
// the text of both attempts, one finish reason, and the usage the two
// rows add up to.
func TestContinuedStreamThroughSDKs(t *testing.T) {
	pxURL, log := frontPrefill(t, "openai", cutThenPrefill(t, "openai"))
	acc := openaiStream(t, openaiClient(pxURL, 0, nil))
	require.Len(t, acc.Choices, 1)
	assert.Equal(t, "hello world", acc.Choices[0].Message.Content)
	assert.Equal(t, "stop", acc.Choices[0].FinishReason)
	assert.Equal(t, "c1", acc.ID, "the first chunk's id")
	rs := log.wait(t, 2)
	require.Len(t, rs, 2, log.String())
	assert.Equal(t, admit.Reset, rs[0].Outcome)
	assert.Equal(t, admit.OK, rs[1].Outcome)
	assert.Equal(t, "cont", rs[1].Seat)
	assert.Equal(t, rs[0].PromptTokens+rs[1].PromptTokens, acc.Usage.PromptTokens)
	assert.Equal(t, rs[0].CompletionTokens+rs[1].CompletionTokens, acc.Usage.CompletionTokens)

	pxURL, log = frontPrefill(t, "anthropic", cutThenPrefill(t, "anthropic"))
	msg := anthropicStream(t, anthropicClient(pxURL, 0, nil))
	require.Len(t, msg.Content, 1)
	assert.Equal(t, "hello world", msg.Content[0].Text, "the prefill went without its trailing space; the model's answer's own is not sent twice")
	assert.EqualValues(t, "end_turn", msg.StopReason)
	assert.Equal(t, "m1", msg.ID, "the first message's id")
	rs = log.wait(t, 2)
	require.Len(t, rs, 2, log.String())
	assert.Equal(t, admit.Reset, rs[0].Outcome)
	assert.Equal(t, admit.OK, rs[1].Outcome)
	assert.Equal(t, rs[0].PromptTokens+rs[1].PromptTokens, msg.Usage.InputTokens)
	assert.Equal(t, rs[0].CompletionTokens+rs[1].CompletionTokens, msg.Usage.OutputTokens)
}
