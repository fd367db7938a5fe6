package seat

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// A stream whose last event carried the finish reason and the usage is
// whole: the attempt ends soon after it, ok, while the server still holds
// the connection open without [DONE] (it lets go only when the test is
// done: an attempt that waited for it would end at the hard timeout).
func TestCompleteStreamHeldOpenEndsWhole(t *testing.T) {
	release := make(chan struct{})
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, "text/event-stream")
		s.data(oaText("hello"))
		s.data(`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		s.data(oaUsage(12, 1))
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	obs := do(t, newTestSeat(t, "openai", srv.URL), 20*time.Second, Request{})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.EqualValues(t, 1, obs.CompletionTokens)
	assert.Contains(t, obs.Detail, "held the connection open")
}

// A stream that gave its finish reason but no usage (a client that did
// not ask for it) and no [DONE] is whole as well: it ends soon after its
// last event, ok, its tokens counted from its text, not at the hard
// timeout while the server holds the connection open.
func TestFinishedStreamWithoutUsageHeldOpenEndsWhole(t *testing.T) {
	release := make(chan struct{})
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, "text/event-stream")
		s.data(oaText("hello"))
		s.data(`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	obs := do(t, newTestSeat(t, "openai", srv.URL), 20*time.Second, Request{})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.Positive(t, obs.CompletionTokens)
	assert.Contains(t, obs.Detail, "held the connection open")
}
