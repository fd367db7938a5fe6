package seat

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/retrygate/retrygate/admit"
)

// TestResolveToLeavesNothingOfTheLast: the virtual loop resolves each
// attempt into its job's one observation, so whatever the last attempt
// left there (a rate-limit header, a code, a model, a detail) must not
// show on the next: ResolveTo into a used observation is Resolve.
func TestResolveToLeavesNothingOfTheLast(t *testing.T) {
	plans := []Plan{
		{Wait: 300 * time.Millisecond, Elapsed: 2 * time.Second, PromptTokens: 1500, CompletionTokens: 600},
		{Status: 429, Wait: 50 * time.Millisecond, Elapsed: 50 * time.Millisecond, RetryAfter: time.Second, HasRetryAfter: true,
			RateLimit: admit.RateLimit{Reset: time.Second}, ErrorCode: "rate_limit_exceeded"},
		{Hang: true, Wait: time.Hour, TTFB: time.Hour, PromptTokens: 1500},
		{ConnError: true},
		{Wait: 100 * time.Millisecond, Elapsed: 3 * time.Second, ResetAfter: time.Second, CompletionTokens: 90,
			CachedTokens: 10, HasCached: true, ReasoningTokens: 5, HasReasoning: true},
		{Wait: 100 * time.Millisecond, Elapsed: time.Second, Incomplete: "max_output_tokens", CompletionTokens: 9},
	}
	used := Observation{Model: "left", Detail: "left", Seat: "left", ErrorCode: "left", HasConnect: true, Connect: time.Second,
		RateLimit: admit.RateLimit{Reset: time.Minute}, HasRetryAfter: true, RetryAfter: time.Minute, HasITL: true, ITLMax: time.Second,
		CachedTokens: 7, HasCached: true, CacheWriteTokens: 7, HasCacheWrite: true, ReasoningTokens: 7, HasReasoning: true}
	for i := range plans {
		for _, hard := range []time.Duration{0, 500 * time.Millisecond, 25 * time.Second} {
			want := Resolve(plans[i], hard, 5*time.Second, 10*time.Second)
			got := used
			ResolveTo(&got, &plans[i], hard, 5*time.Second, 10*time.Second)
			assert.Equal(t, want, got, "plan %d, hard %s", i, hard)
			used = got // the next starts from what this one left
			used.Model, used.Detail, used.Seat = "left", "left", "left"
		}
	}
}
