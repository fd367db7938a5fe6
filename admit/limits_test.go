package admit

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestLimitsSaturate(t *testing.T) {
	assert.Equal(t, MaxTokens, AddTokens(5_000_000_000_000_000_000, 5_000_000_000_000_000_000))
	assert.Equal(t, MaxTokens, ClampTokensFloat(9e18))
	assert.Equal(t, int64(0), ClampTokensFloat(math.NaN()))
	assert.Equal(t, int64(0), ClampTokens(-4))
	assert.Equal(t, MaxDuration, SecondsDuration(1e12))
	assert.Equal(t, MaxDuration, AddDuration(MaxDuration, time.Second))
	assert.Equal(t, 1500*time.Millisecond, SecondsDuration(1.5))
	assert.Equal(t, time.Duration(0), SecondsDuration(math.Inf(-1)))
	assert.Equal(t, MaxUSD, AddUSD(math.Inf(1), 1))
	assert.Equal(t, 0.25, AddUSD(0.1, 0.15))
}
