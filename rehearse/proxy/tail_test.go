package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// providerHold is how long the provider below holds a finished stream's
// connection open before it ends the body.
const providerHold = 5 * time.Second

// heldOpen is a provider on 127.0.0.1 that streams a whole answer (its
// last event carries the finish reason and the usage), then holds the
// connection open for providerHold without the terminal event before it
// ends the body; released is set when it does (not when the proxy closes
// the connection first).
func heldOpen(t *testing.T, kind string) (base string, released *atomic.Bool) {
	t.Helper()
	released = new(atomic.Bool)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		if kind == "anthropic" {
			_, _ = io.WriteString(w, anthropicWhole)
		} else {
			_, _ = io.WriteString(w, openaiWhole)
		}
		_ = http.NewResponseController(w).Flush()
		hold := time.NewTimer(providerHold)
		defer hold.Stop()
		select {
		case <-hold.C:
			released.Store(true)
		case <-r.Context().Done(): // the proxy let it go first
		}
	})
	srv := &http.Server{Handler: mux}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/v1", released
}

const (
	openaiWhole = `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"hello"},"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}` + "\n\n"
	anthropicWhole = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":12,\"output_tokens\":0}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n"
)

// A stream whose last event carried the finish reason and the usage is
// whole: the client's read ends soon after it, while the provider still
// holds the connection open (it would keep the client waiting the whole
// hold), and the row is ok.
func TestWholeStreamEndsWhileProviderHoldsOpen(t *testing.T) {
	for _, tc := range []struct{ kind, path, body, answer string }{
		{"openai", "/v1/chat/completions", openaiStream, openaiWhole},
		{"anthropic", "/v1/messages", `{"model":"m1","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"stream":true}`, anthropicWhole},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			base, released := heldOpen(t, tc.kind)
			pol := testPolicy()
			pol.Budget.Deadline, pol.Timeouts.Hard = 30*time.Second, 20*time.Second // past the hold: no clock of the policy ends it
			px := start(t, pol, []seat.Config{seatCfg("s", tc.kind, base)})
			req, err := http.NewRequest(http.MethodPost, px.url+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err, "the stream ends cleanly")
			assert.False(t, released.Load(), "the client's read ended before the provider let the connection go")
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, tc.answer, string(got), "every event, as the provider sent it")
			rs := px.rows.wait(t, 1)
			require.Len(t, rs, 1)
			assert.Equal(t, admit.OK, rs[0].Outcome, rs[0].Note)
			assert.Less(t, rs[0].Elapsed, providerHold)
		})
	}
}
