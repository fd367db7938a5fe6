package seat

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/retrygate/retrygate/admit"
)

// Gemini's OpenAI-compatible endpoint (…/v1beta/openai/) answers a 429 in
// Google's error shape, sometimes wrapped in a list: a per-minute quota
// is a rate limit to wait out, a daily one is permanent.
func TestGeminiQuotaErrors(t *testing.T) {
	const perMinute = `{"error":{"code":429,"message":"You exceeded your current quota. Please retry in 20.04s.","status":"RESOURCE_EXHAUSTED","details":[` +
		`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash"},"quotaValue":"10"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"20s"}]}}`
	const perDay = `[{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[` +
		`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaValue":"250"}]}]}}]`
	const bare = `[{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}]`
	for _, tt := range []struct {
		name, body, code string
		want             admit.Outcome
	}{
		{"per-minute quota", perMinute, "RESOURCE_EXHAUSTED", admit.RateLimited},
		{"daily quota", perDay, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", admit.ClientError},
		{"no details", bare, "RESOURCE_EXHAUSTED", admit.RateLimited},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				io.WriteString(w, tt.body)
			}))
			obs := do(t, newTestSeat(t, "openai", srv.URL, func(c *Config) { c.Model = "gemini-2.5-flash" }), 2*time.Second, Request{})
			assert.Equal(t, tt.want, obs.Outcome)
			assert.Equal(t, tt.code, obs.ErrorCode)
			assert.Equal(t, admit.Free, obs.Billing)
		})
	}
}
