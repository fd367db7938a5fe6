package admit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var policy = RetryPolicy{BaseDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second, SlowServerAfter: 10 * time.Second, HonorRetryAfter: true, TimeoutsRetried: 1}

func TestBackoffCeiling(t *testing.T) {
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i, w := range want {
		assert.Equal(t, w, BackoffCeiling(policy, i+1), "retry %d", i+1)
	}
	assert.Equal(t, 8*time.Second, BackoffCeiling(policy, 1000), "no overflow")
}

func TestBackoffFullJitterIsSeededAndBounded(t *testing.T) {
	a := rand.New(rand.NewPCG(7, 7))
	b := rand.New(rand.NewPCG(7, 7))
	c := rand.New(rand.NewPCG(8, 8))
	same, differ := true, false
	for n := 1; n <= 50; n++ {
		x, y, z := Backoff(policy, n, a), Backoff(policy, n, b), Backoff(policy, n, c)
		same = same && x == y
		differ = differ || x != z
		assert.GreaterOrEqual(t, x, time.Duration(0))
		assert.LessOrEqual(t, x, BackoffCeiling(policy, n))
	}
	assert.True(t, same, "same seed, same jitter")
	assert.True(t, differ, "different seed, different jitter")
}

func TestAfterFailure(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name     string
		f        Failure
		h        JobHistory
		retry    bool
		reason   Reason
		delay    time.Duration // -1: any jittered delay within the ceiling
		fallback bool
	}{
		{"client error is permanent", Failure{Outcome: ClientError}, JobHistory{}, false, ReasonPermanentError, 0, false},
		{"incomplete is permanent", Failure{Outcome: Incomplete, Billing: Billable}, JobHistory{}, false, ReasonPermanentError, 0, false},
		{"429 retry-after wins", Failure{Outcome: RateLimited, RetryAfter: 3 * time.Second, HasRetry: true}, JobHistory{}, true, "", 3 * time.Second, false},
		{"429 without retry-after backs off", Failure{Outcome: RateLimited}, JobHistory{}, true, "", -1, false},
		{"conn error retries promptly", Failure{Outcome: ConnError}, JobHistory{}, true, "", 0, false},
		{"first timeout retried on fallback", Failure{Outcome: Timeout, Billing: Ambiguous}, JobHistory{Timeouts: 1}, true, "", -1, true},
		{"second timeout refused", Failure{Outcome: Timeout, Billing: Ambiguous}, JobHistory{Timeouts: 2}, false, ReasonRetryLimit, 0, false},
		{"slow 5xx once on fallback", Failure{Outcome: ServerError, Billing: Ambiguous}, JobHistory{SlowServer: 1}, true, "", -1, true},
		{"slow 5xx twice refused", Failure{Outcome: ServerError, Billing: Ambiguous}, JobHistory{SlowServer: 2}, false, ReasonRetryLimit, 0, false},
		{"fast 5xx backs off", Failure{Outcome: ServerError, Billing: Free}, JobHistory{Retries: 2}, true, "", -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := AfterFailure(policy, tt.f, tt.h, r)
			assert.Equal(t, tt.retry, s.Retry)
			assert.Equal(t, tt.reason, s.Reason)
			assert.Equal(t, tt.fallback, s.Fallback)
			if tt.delay >= 0 {
				assert.Equal(t, tt.delay, s.Delay)
			} else {
				assert.LessOrEqual(t, s.Delay, BackoffCeiling(policy, tt.h.Retries+1))
			}
		})
	}
	honorOff := policy
	honorOff.HonorRetryAfter = false
	s := AfterFailure(honorOff, Failure{Outcome: RateLimited, RetryAfter: 30 * time.Second, HasRetry: true}, JobHistory{}, r)
	assert.LessOrEqual(t, s.Delay, policy.BaseDelay, "Retry-After ignored when honor_retry_after is off")
}

func TestClassifyHTTP(t *testing.T) {
	tests := []struct {
		status int
		code   string
		want   Outcome
	}{
		{200, "", OK}, {429, "", RateLimited}, {400, "", ClientError}, {401, "", ClientError},
		{403, "", ClientError}, {404, "", ClientError}, {422, "", ClientError}, {500, "", ServerError},
		{503, "", ServerError}, {529, "overloaded_error", ServerError}, {200, "overloaded_error", ServerError},
		{400, "context_length_exceeded", ClientError}, {429, "insufficient_quota", ClientError},
		{400, "content_filter", ClientError}, {408, "", ServerError},
		// A failed Responses API answer inside a 200 stream, by its code.
		{200, "server_error", ServerError}, {200, "rate_limit_exceeded", RateLimited},
		{200, "invalid_prompt", ClientError}, {200, "image_too_large", ClientError},
		{200, "vector_store_timeout", ServerError},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ClassifyHTTP(tt.status, tt.code), "%d %s", tt.status, tt.code)
	}
}

func TestBillingOf(t *testing.T) {
	assert.Equal(t, Free, BillingOf(ServerError, 2*time.Second, 10*time.Second))
	assert.Equal(t, Ambiguous, BillingOf(ServerError, 10*time.Second, 10*time.Second))
	assert.Equal(t, Ambiguous, BillingOf(Timeout, time.Second, 10*time.Second))
	assert.Equal(t, Billable, BillingOf(Reset, time.Second, 10*time.Second))
	assert.Equal(t, Free, BillingOf(RateLimited, time.Second, 10*time.Second))
	assert.Equal(t, Billable, BillingOf(Incomplete, time.Second, 10*time.Second))
	assert.True(t, Ambiguous.Billed())
	assert.False(t, Free.Billed())
}

func TestIncompleteIsAnOutcomeButNoSeatFailure(t *testing.T) {
	o, err := ParseOutcome("incomplete")
	require.NoError(t, err)
	assert.Equal(t, Incomplete, o)
	assert.False(t, Incomplete.SeatFailure(), "the request's own cap ended it, not the seat")
	assert.False(t, ClientError.SeatFailure())
	assert.False(t, OK.SeatFailure())
	assert.True(t, ServerError.SeatFailure())
	assert.True(t, RateLimited.SeatFailure())
}
