package seat

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// heldOpen is a seat that sends events, then holds the connection open
// without [DONE] until the test is done: an attempt that waited for it
// would end at the hard timeout.
func heldOpen(t *testing.T, events ...string) string {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, "text/event-stream")
		for _, ev := range events {
			s.data(ev)
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	return srv.URL
}

const oaFinished = `{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`

// A stream whose last event carried the finish reason and the usage is
// whole: the attempt ends soon after it, ok, while the server still holds
// the connection open without [DONE].
func TestCompleteStreamHeldOpenEndsWhole(t *testing.T) {
	obs := do(t, newTestSeat(t, "openai", heldOpen(t, oaText("hello"), oaFinished, oaUsage(12, 1))), 20*time.Second, Request{})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.EqualValues(t, 1, obs.CompletionTokens)
	assert.Contains(t, obs.Detail, "held the connection open")
}

// A stream that gave its finish reason but no usage (a client that did
// not ask for it) and no [DONE] is whole as well: it ends soon after its
// last event, ok, its tokens counted from its text, not at the hard
// timeout while the server holds the connection open.
func TestFinishedStreamWithoutUsageHeldOpenEndsWhole(t *testing.T) {
	obs := do(t, newTestSeat(t, "openai", heldOpen(t, oaText("hello"), oaFinished)), 20*time.Second, Request{})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.Positive(t, obs.CompletionTokens)
	assert.Contains(t, obs.Detail, "held the connection open")
}
