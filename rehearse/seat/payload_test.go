package seat

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// A seat reuses the last request body while attempts ask for the same
// thing; a different prompt, messages or max_tokens is sent as asked,
// and every attempt carries its own idempotency key.
func TestRequestBodyFollowsEachAttempt(t *testing.T) {
	type seen struct {
		idem string
		body struct {
			MaxTokens int       `json:"max_tokens"`
			Messages  []Message `json:"messages"`
		}
	}
	var mu sync.Mutex
	var got []seen
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s seen
		s.idem = r.Header.Get("Idempotency-Key")
		data, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(data, &s.body)
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
		sw := startStream(w, "text/event-stream")
		sw.data(oaText("hi"))
		sw.data(oaUsage(3, 1))
		sw.raw("data: [DONE]\n\n")
	}))
	s := newTestSeat(t, "openai", srv.URL)
	chat := []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hello"}}
	reqs := []Request{
		{Prompt: "one", MaxTokens: 10, IdempotencyKey: "r1-1"},
		{Prompt: "one", MaxTokens: 10, IdempotencyKey: "r1-2"},
		{Prompt: "two", MaxTokens: 10, IdempotencyKey: "r1-3"},
		{Prompt: "two", MaxTokens: 20, IdempotencyKey: "r1-4"},
		{Messages: chat, MaxTokens: 20, IdempotencyKey: "r1-5"},
		{Messages: chat[1:], MaxTokens: 20, IdempotencyKey: "r1-6"},
		{Prompt: "one", MaxTokens: 10},
	}
	for _, req := range reqs {
		obs := do(t, s, 2*time.Second, req)
		require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	}
	require.Len(t, got, len(reqs))
	for i, req := range reqs {
		want := req.chat()
		assert.Equal(t, want, got[i].body.Messages, "attempt %d", i+1)
		assert.Equal(t, req.MaxTokens, got[i].body.MaxTokens, "attempt %d", i+1)
		assert.Equal(t, req.IdempotencyKey, got[i].idem, "attempt %d", i+1)
	}
}

// A request's Body goes out byte for byte in place of the body the seat
// would build (its Prompt is not sent), and a stream without usage still
// counts the prompt's tokens from Prompt.
func TestRequestBodySentAsGiven(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(data))
		mu.Unlock()
		sw := startStream(w, "text/event-stream")
		sw.data(oaText("hi"))
		sw.raw("data: [DONE]\n\n")
	}))
	s := newTestSeat(t, "openai", srv.URL)
	own := `{"model":"client's","messages":[{"role":"user","content":"hello there"}],"stream":true,"temperature":0.25}`
	forwarded := do(t, s, 2*time.Second, Request{Prompt: "hello there", Body: []byte(own)})
	require.Equal(t, admit.OK, forwarded.Outcome, forwarded.Detail)
	built := do(t, s, 2*time.Second, Request{Prompt: "hello there"})
	require.Equal(t, admit.OK, built.Outcome, built.Detail)
	require.Len(t, got, 2)
	assert.Equal(t, own, got[0])
	assert.NotEqual(t, own, got[1])
	assert.Equal(t, FromTokenizer, forwarded.TokensFrom)
	assert.Equal(t, built.PromptTokens, forwarded.PromptTokens)
	assert.Positive(t, forwarded.PromptTokens)
}
