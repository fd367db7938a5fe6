package seat

import (
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// parts is what a test expects of an observation's token parts; -1 is
// "not reported".
type parts struct{ prompt, completion, cached, write, reasoning int64 }

func requireParts(t *testing.T, want parts, o Observation) {
	t.Helper()
	require.Equal(t, admit.OK, o.Outcome, o.Detail)
	assert.Equal(t, FromUsage, o.TokensFrom)
	assert.Equal(t, want.prompt, o.PromptTokens, "prompt")
	assert.Equal(t, want.completion, o.CompletionTokens, "completion")
	part := func(name string, n int64, has bool, w int64) {
		if w < 0 {
			assert.False(t, has, "%s: reported %d, want not reported", name, n)
			return
		}
		assert.True(t, has, "%s: not reported", name)
		assert.Equal(t, w, n, name)
	}
	part("cached", o.CachedTokens, o.HasCached, want.cached)
	part("cache write", o.CacheWriteTokens, o.HasCacheWrite, want.write)
	part("reasoning", o.ReasoningTokens, o.HasReasoning, want.reasoning)
}

// Chat Completions' documented usage chunk: cached input inside
// prompt_tokens (prompt_tokens_details), reasoning inside
// completion_tokens (completion_tokens_details).
const oaUsageDetails = `{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"o4-mini-2025-04-16","system_fingerprint":"fp_7fcd609668","choices":[],` +
	`"usage":{"prompt_tokens":4023,"completion_tokens":310,"total_tokens":4333,"prompt_tokens_details":{"cached_tokens":3968,"audio_tokens":0},` +
	`"completion_tokens_details":{"reasoning_tokens":256,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`

func TestOpenAIUsageDetails(t *testing.T) {
	t.Run("stream", func(t *testing.T) {
		srv := loopback(t, sseHandler(time.Millisecond,
			data(oaDelta(`{"role":"assistant","content":""}`)),
			data(oaText("Four")), data(oaText(" words")),
			data(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`),
			data(oaUsageDetails),
			"data: [DONE]\n\n",
		))
		requireParts(t, parts{4023, 310, 3968, -1, 256}, do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{}))
	})
	t.Run("whole", func(t *testing.T) {
		srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}],`+
				`"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920},"completion_tokens_details":{"reasoning_tokens":0}}}`)
		}))
		// A reported 0 is kept: no reasoning, said so.
		requireParts(t, parts{2006, 300, 1920, -1, 0}, do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{}))
	})
	t.Run("gateway cache writes", func(t *testing.T) {
		srv := loopback(t, sseHandler(time.Millisecond, data(oaText("hi")),
			data(`{"choices":[],"usage":{"prompt_tokens":4000,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":0,"cache_write_tokens":3979}}}`), "data: [DONE]\n\n"))
		requireParts(t, parts{4000, 5, 0, 3979, -1}, do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{}))
	})
	t.Run("no details", func(t *testing.T) {
		// A compatible server (vLLM, Ollama's /v1) that names no parts:
		// none is reported, none is made up.
		srv := loopback(t, sseHandler(time.Millisecond, data(oaText("hi")), data(oaUsage(12, 3)), "data: [DONE]\n\n"))
		requireParts(t, parts{12, 3, -1, -1, -1}, do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{}))
	})
}

// The Messages API's documented cache fields sit beside input_tokens:
// the prompt is input + cache_creation + cache_read, and each cache
// field is its part. message_delta's usage is cumulative and may repeat
// them.
func TestAnthropicCacheParts(t *testing.T) {
	t.Run("stream", func(t *testing.T) {
		srv := loopback(t, sseHandler(time.Millisecond,
			"event: message_start\n"+data(`{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,`+
				`"usage":{"input_tokens":21,"cache_creation_input_tokens":3979,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":3979,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}`),
			"event: content_block_start\n"+data(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
			"event: ping\n"+data(`{"type":"ping"}`),
			"event: content_block_delta\n"+data(anText("Hello")),
			"event: content_block_stop\n"+data(`{"type":"content_block_stop","index":0}`),
			"event: message_delta\n"+data(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":21,"cache_creation_input_tokens":3979,"cache_read_input_tokens":0,"output_tokens":42}}`),
			"event: message_stop\n"+data(`{"type":"message_stop"}`),
		))
		requireParts(t, parts{4000, 42, 0, 3979, -1}, do(t, newTestSeat(t, "anthropic", srv.URL), 2*time.Second, Request{}))
	})
	t.Run("whole", func(t *testing.T) {
		srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn",`+
				`"usage":{"input_tokens":21,"cache_creation_input_tokens":0,"cache_read_input_tokens":3979,"output_tokens":40}}`)
		}))
		requireParts(t, parts{4000, 40, 3979, 0, -1}, do(t, newTestSeat(t, "anthropic", srv.URL), 2*time.Second, Request{}))
	})
	t.Run("no cache fields", func(t *testing.T) {
		srv := loopback(t, sseHandler(time.Millisecond,
			"event: message_start\n"+data(`{"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}`),
			"event: content_block_delta\n"+data(anText("Hello")),
			"event: message_delta\n"+data(`{"type":"message_delta","usage":{"output_tokens":15}}`),
			"event: message_stop\n"+data(`{"type":"message_stop"}`),
		))
		requireParts(t, parts{25, 15, -1, -1, -1}, do(t, newTestSeat(t, "anthropic", srv.URL), 2*time.Second, Request{}))
	})
}

// An exec command that passes on Chat Completions' usage, details
// included, reports its parts as the openai seat would.
func TestExecUsageDetails(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("sh")
	}
	s := execSeatFor(t, `cat >/dev/null; echo answer; echo '{"usage":{"prompt_tokens":4023,"completion_tokens":310,"prompt_tokens_details":{"cached_tokens":3968},"completion_tokens_details":{"reasoning_tokens":256}}}'`)
	requireParts(t, parts{4023, 310, 3968, -1, 256}, do(t, s, 5*time.Second, Request{}))
}
