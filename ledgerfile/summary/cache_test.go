package summary

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// The worked example of docs/reading.md: a 4,000-token prompt, 3,979 of
// it cacheable, retried twice; the first retry reads the cache, the
// second finds the entry expired and writes it again. Prices $3 in, $15
// out, $0.30 a cache read, $3.75 a cache write, per million.
const cacheLog = `job=j1 attempt=1 seat=s wait_s=1 elapsed_s=4 tokens=4400 prompt_tokens=4000 completion_tokens=400 cached_tokens=0 cache_write_tokens=3979 outcome=reset billing=billable cost_usd=0.02098425 uncached_usd=0.018 decision=admit
job=j1 attempt=2 seat=s wait_s=1 elapsed_s=4 tokens=4400 prompt_tokens=4000 completion_tokens=400 cached_tokens=3979 cache_write_tokens=0 outcome=reset billing=billable cost_usd=0.0072567 uncached_usd=0.018 decision=admit
job=j1 attempt=3 seat=s wait_s=1 elapsed_s=5 tokens=4600 prompt_tokens=4000 completion_tokens=600 cached_tokens=0 cache_write_tokens=3979 reasoning_tokens=150 outcome=ok billing=billable cost_usd=0.02398425 uncached_usd=0.021 decision=admit job_end=succeeded
job=j2 attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=110 prompt_tokens=100 completion_tokens=10 outcome=ok billing=billable cost_usd=0.00045 decision=admit job_end=succeeded
`

func TestCacheFigures(t *testing.T) {
	s := summarizeText(t, cacheLog, Options{})
	c := s.All.Cache
	assert.Equal(t, int64(2), c.Retries, "both retries report cache writes")
	assert.Equal(t, int64(1), c.Rewritten, "the second retry wrote the prompt again")
	assert.Equal(t, Figure(0.5), c.WriteRateOnRetries)
	assert.Equal(t, int64(3979), c.CachedTokens)
	assert.Equal(t, Figure(3979.0/12000), c.CachedShare, "over the rows reporting cached_tokens only")
	assert.Equal(t, int64(2*3979), c.CacheWriteTokens)
	assert.Equal(t, int64(150), c.ReasoningTokens)
	assert.Equal(t, Figure(150.0/600), c.ReasoningShare)
	assert.InDelta(t, (0.018-0.02098425)+(0.018-0.0072567)+(0.021-0.02398425), float64(c.SavedUSD), 1e-12)
	// The retry tax: the two attempts before the kept one.
	assert.InDelta(t, 0.02098425+0.0072567, float64(s.All.RetryTax.USD), 1e-12)
	assert.InDelta(t, 0.036, float64(c.RetryTaxUncachedUSD), 1e-12, "at price_in the same retries cost $0.036")

	for _, tc := range []struct {
		metric, expr string
		pass         bool
	}{
		{"cache_write_rate_on_retries", "rate < 10%", false},
		{"cache_write_rate_on_retries", "rate <= 50%", true},
		{"cache_write_rate_on_retries", "count == 1", true},
		{"cached_share", "> 30%", true},
		{"reasoning_share", "< 25%", false},
	} {
		th, err := admit.ParseThreshold(tc.metric, tc.expr)
		require.NoError(t, err, tc.metric)
		o, _ := s.Observed(tc.metric)
		_, pass := th.Eval(o)
		assert.Equal(t, tc.pass, pass, "%s %s", tc.metric, tc.expr)
	}
}

// A log with no parts has no cache figures: null. A share over nothing
// cannot pass; a rate over no retries is 0, as every rate over an empty
// population is (admit.Threshold.Eval).
func TestCacheFiguresAbsent(t *testing.T) {
	s := summarizeText(t, "job=a attempt=1 wait_s=1 elapsed_s=2 tokens=3 prompt_tokens=2 completion_tokens=1 outcome=server_error decision=admit\njob=a attempt=2 wait_s=1 elapsed_s=2 tokens=3 prompt_tokens=2 completion_tokens=1 outcome=ok decision=admit job_end=succeeded\n", Options{})
	c := s.All.Cache
	for _, f := range []Figure{c.WriteRateOnRetries, c.CachedShare, c.ReasoningShare, c.SavedUSD, c.RetryTaxUncachedUSD} {
		assert.True(t, math.IsNaN(float64(f)))
	}
	th, err := admit.ParseThreshold("cached_share", "> 0%")
	require.NoError(t, err)
	o, _ := s.Observed("cached_share")
	_, pass := th.Eval(o)
	assert.False(t, pass)
	th, err = admit.ParseThreshold("cache_write_rate_on_retries", "rate < 10%")
	require.NoError(t, err)
	o, n := s.Observed("cache_write_rate_on_retries")
	v, pass := th.Eval(o)
	assert.True(t, pass)
	assert.Equal(t, 0.0, v)
	assert.Equal(t, int64(0), n)
}
