package seat

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/retrygate/retrygate/admit"
)

// A 429 as each provider documents it: which limit ran out, how much of
// the other is left, and when the one that ran out resets.
func TestRateLimitHeaders(t *testing.T) {
	tests := []struct {
		name, kind, body string
		header           map[string]string
		want             admit.RateLimit
		retryAfter       time.Duration
	}{
		{"openai token-rate 429", "openai",
			`{"error":{"message":"Rate limit reached on tokens per min (TPM): Limit 30000, Used 30000, Requested 512.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
			map[string]string{
				"X-Ratelimit-Limit-Requests": "500", "X-Ratelimit-Limit-Tokens": "30000",
				"X-Ratelimit-Remaining-Requests": "499", "X-Ratelimit-Remaining-Tokens": "0",
				"X-Ratelimit-Reset-Requests": "120ms", "X-Ratelimit-Reset-Tokens": "6m0s",
				"Retry-After-Ms": "1024", "Retry-After": "2",
			},
			admit.RateLimit{RemainingRequests: 499, RemainingTokens: 0, Reset: 6 * time.Minute, HasRequests: true, HasTokens: true, HasReset: true},
			1024 * time.Millisecond},
		{"openai request-rate 429", "openai",
			`{"error":{"message":"Rate limit reached on requests per min (RPM)","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			map[string]string{
				"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Remaining-Tokens": "28976",
				"X-Ratelimit-Reset-Requests": "1s", "X-Ratelimit-Reset-Tokens": "20ms",
			},
			admit.RateLimit{RemainingRequests: 0, RemainingTokens: 28976, Reset: time.Second, HasRequests: true, HasTokens: true, HasReset: true},
			0},
		{"anthropic request-rate 429", "anthropic",
			`{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}`,
			map[string]string{
				"Date":                                   "Wed, 21 Oct 2026 07:28:00 GMT",
				"Retry-After":                            "14",
				"Anthropic-Ratelimit-Requests-Limit":     "50",
				"Anthropic-Ratelimit-Requests-Remaining": "0",
				"Anthropic-Ratelimit-Requests-Reset":     "2026-10-21T07:28:14Z",
				"Anthropic-Ratelimit-Tokens-Limit":       "100000",
				"Anthropic-Ratelimit-Tokens-Remaining":   "92000",
				"Anthropic-Ratelimit-Tokens-Reset":       "2026-10-21T07:28:03Z",
			},
			admit.RateLimit{RemainingRequests: 0, RemainingTokens: 92000, Reset: 14 * time.Second, HasRequests: true, HasTokens: true, HasReset: true},
			14 * time.Second},
		{"anthropic input-token 429, no combined tokens limit", "anthropic",
			`{"type":"error","error":{"type":"rate_limit_error","message":"input tokens per minute"}}`,
			map[string]string{
				"Date":                                        "Wed, 21 Oct 2026 07:28:00 GMT",
				"Anthropic-Ratelimit-Requests-Remaining":      "41",
				"Anthropic-Ratelimit-Requests-Reset":          "2026-10-21T07:28:01Z",
				"Anthropic-Ratelimit-Input-Tokens-Remaining":  "0",
				"Anthropic-Ratelimit-Input-Tokens-Reset":      "2026-10-21T07:28:30.5Z",
				"Anthropic-Ratelimit-Output-Tokens-Remaining": "16000",
				"Anthropic-Ratelimit-Output-Tokens-Reset":     "2026-10-21T07:28:00Z",
			},
			admit.RateLimit{RemainingRequests: 41, RemainingTokens: 0, Reset: 30500 * time.Millisecond, HasRequests: true, HasTokens: true, HasReset: true},
			0},
		{"no headers", "openai", `{"error":{"code":"rate_limit_exceeded"}}`, nil, admit.RateLimit{}, 0},
		{"garbage is not reported", "openai", `{"error":{"code":"rate_limit_exceeded"}}`,
			map[string]string{"X-Ratelimit-Remaining-Requests": "-1", "X-Ratelimit-Remaining-Tokens": "lots", "X-Ratelimit-Reset-Tokens": "soon"},
			admit.RateLimit{}, 0},
		{"past any limit clamps", "openai", `{"error":{"code":"rate_limit_exceeded"}}`,
			map[string]string{"X-Ratelimit-Remaining-Tokens": "99999999999999999999", "X-Ratelimit-Reset-Tokens": "1e12"},
			admit.RateLimit{RemainingTokens: admit.MaxTokens, Reset: admit.MaxDuration, HasTokens: true, HasReset: true}, 0},
		{"another provider's headers are not read", "openai", `{"error":{"code":"rate_limit_exceeded"}}`,
			map[string]string{"Anthropic-Ratelimit-Requests-Remaining": "0", "Anthropic-Ratelimit-Requests-Reset": "2026-10-21T07:28:14Z"},
			admit.RateLimit{}, 0},
		{"a year-9999 reset clamps", "anthropic", `{"type":"error","error":{"type":"rate_limit_error"}}`,
			map[string]string{"Date": "Wed, 21 Oct 2026 07:28:00 GMT", "Anthropic-Ratelimit-Tokens-Reset": "9999-12-31T23:59:59Z"},
			admit.RateLimit{Reset: admit.MaxDuration, HasReset: true}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				io.WriteString(w, tt.body)
			}))
			obs := do(t, newTestSeat(t, tt.kind, srv.URL), 2*time.Second, Request{})
			assert.Equal(t, admit.RateLimited, obs.Outcome)
			assert.Equal(t, tt.want, obs.RateLimit)
			if tt.retryAfter > 0 {
				assert.Equal(t, tt.retryAfter, obs.RetryAfter, "retry-after-ms, else Retry-After")
			}
		})
	}
}

// A 200 carries the state too: with no limit at zero, the reset is the
// latest, when every limit reported has room again.
func TestRateLimitOnSuccess(t *testing.T) {
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Ratelimit-Remaining-Requests", "4999")
		w.Header().Set("X-Ratelimit-Remaining-Tokens", "159976")
		w.Header().Set("X-Ratelimit-Reset-Requests", "12ms")
		w.Header().Set("X-Ratelimit-Reset-Tokens", "1m2.5s")
		sseHandler(0, data(oaText("hi")), data(oaUsage(3, 1)), "data: [DONE]\n\n")(w, r)
	}))
	obs := do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{})
	assert.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.Equal(t, admit.RateLimit{RemainingRequests: 4999, RemainingTokens: 159976, Reset: 62500 * time.Millisecond,
		HasRequests: true, HasTokens: true, HasReset: true}, obs.RateLimit)
}
