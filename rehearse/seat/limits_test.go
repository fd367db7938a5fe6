package seat

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// TestHugeUsageClamps (issue 12, case 3): counts a seat reports that no
// int64 sum survives are clamped at the boundary, and their sum
// saturates: never a wrapped or negative count.
func TestHugeUsageClamps(t *testing.T) {
	tests := []struct {
		name               string
		prompt, completion string
		wantP, wantC       int64
	}{
		{"9e18 each", "9e18", "9e18", admit.MaxTokens, admit.MaxTokens},
		{"beyond int64", "99999999999999999999999", "1e400", admit.MaxTokens, admit.MaxTokens},
		{"negative and fractional", "-5", "2.9", 0, 2},
		{"max int64", "9223372036854775807", "1", admit.MaxTokens, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			usage := fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%s,"completion_tokens":%s}}`, tt.prompt, tt.completion)
			srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sw := startStream(w, "text/event-stream")
				sw.data(oaText("hi"))
				sw.data(usage)
				sw.raw("data: [DONE]\n\n")
			}))
			obs := do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{})
			require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
			assert.Equal(t, FromUsage, obs.TokensFrom)
			assert.Equal(t, tt.wantP, obs.PromptTokens)
			assert.Equal(t, tt.wantC, obs.CompletionTokens)
			assert.Equal(t, admit.AddTokens(tt.wantP, tt.wantC), obs.Tokens())
			assert.GreaterOrEqual(t, obs.Tokens(), int64(0))
		})
	}
	if runtime.GOOS != "windows" {
		t.Run("exec usage line", func(t *testing.T) {
			s := execSeatFor(t, `cat >/dev/null; echo answer; echo '{"usage":{"prompt_tokens":9e18,"completion_tokens":9e18}}'`)
			obs := do(t, s, 5*time.Second, Request{})
			require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
			assert.Equal(t, admit.MaxTokens, obs.PromptTokens)
			assert.Equal(t, admit.MaxTokens, obs.Tokens())
		})
	}
	assert.Equal(t, admit.MaxTokens, (&Observation{PromptTokens: admit.MaxTokens, CompletionTokens: admit.MaxTokens}).Tokens())
}
