package seat

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

var chatReq = Request{
	IdempotencyKey: "r1-1",
	Messages: []Message{
		{Role: "system", Content: "You answer in one short sentence."},
		{Role: "user", Content: "what is a retry budget?"},
		{Role: "assistant", Content: "A cap on retries."},
		{Role: "user", Content: "and a wait cap?"},
	},
	MaxTokens: 32,
}

// TestMessagesOnTheWire: a request given as messages reaches a 127.0.0.1
// server as those messages, in order, in each wire format; Anthropic's
// system role goes to its system field, not into messages.
func TestMessagesOnTheWire(t *testing.T) {
	all := []any{
		map[string]any{"role": "system", "content": "You answer in one short sentence."},
		map[string]any{"role": "user", "content": "what is a retry budget?"},
		map[string]any{"role": "assistant", "content": "A cap on retries."},
		map[string]any{"role": "user", "content": "and a wait cap?"},
	}
	for _, tc := range []struct {
		kind, ctype string
		end         func(*streamWriter)
		messages    []any
		system      any
	}{
		{"openai", "text/event-stream", func(s *streamWriter) { s.data(oaText("ok")); s.raw("data: [DONE]\n\n") }, all, nil},
		{"ollama", "application/x-ndjson", func(s *streamWriter) { s.line(olText("ok")); s.line(`{"done":true}`) }, all, nil},
		{"anthropic", "text/event-stream", func(s *streamWriter) {
			s.event("content_block_delta", anText("ok"))
			s.event("message_stop", `{"type":"message_stop"}`)
		}, all[1:], "You answer in one short sentence."},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			bodies := make(chan map[string]any, 1)
			srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				var body map[string]any
				_ = json.Unmarshal(b, &body)
				bodies <- body
				tc.end(startStream(w, tc.ctype))
			}))
			obs := do(t, newTestSeat(t, tc.kind, srv.URL), 2*time.Second, chatReq)
			require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
			body := <-bodies
			assert.Equal(t, tc.messages, body["messages"])
			assert.Equal(t, tc.system, body["system"])
		})
	}
}

// TestMessagesCountedWhenNoUsage: without usage in the answer, the local
// tokenizer counts the messages' text, so a long conversation counts more
// prompt tokens than a short one.
func TestMessagesCountedWhenNoUsage(t *testing.T) {
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, "text/event-stream")
		s.data(oaText("ok"))
		s.raw("data: [DONE]\n\n")
	}))
	st := newTestSeat(t, "openai", srv.URL)
	short := do(t, st, 2*time.Second, Request{Messages: []Message{{Role: "user", Content: "hi"}}})
	long := do(t, st, 2*time.Second, chatReq)
	require.Equal(t, FromTokenizer, long.TokensFrom, long.Detail)
	require.Equal(t, FromTokenizer, short.TokensFrom, short.Detail)
	assert.Greater(t, long.PromptTokens, short.PromptTokens+10, "the messages' text is counted")
}

func TestPromptSHA(t *testing.T) {
	assert.Equal(t, "", PromptSHA("", nil))
	// A prompt's fingerprint is its text's, as before prompt sets.
	assert.Equal(t, "9f86d081884c", PromptSHA("test", nil))
	// Messages: their canonical JSON; role and order matter.
	a := PromptSHA("", []Message{{"user", "hi"}})
	assert.Len(t, a, 12)
	assert.NotEqual(t, a, PromptSHA("", []Message{{"system", "hi"}}))
	assert.NotEqual(t, a, PromptSHA("hi", nil))
	assert.Equal(t, a, PromptSHA("", []Message{{"user", "hi"}}))
}
