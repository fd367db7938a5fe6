package seat

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"retrygate/admit"
)

// A seat's cost is the gate's: clamped, like the reservation it is checked against.
func TestConfigCostIsTheGatesCost(t *testing.T) {
	c := Config{PriceIn: 1e12, PriceOut: 1e12}
	usd, ok := c.Cost(admit.MaxTokens, admit.MaxTokens)
	assert.True(t, ok)
	assert.Equal(t, admit.MaxUSD, usd)
	assert.Equal(t, admit.Reservation(1e12, 1e12, admit.MaxTokens, admit.MaxTokens), usd)
	usd, _ = Config{PriceIn: 2.5, PriceOut: 10}.Cost(-1000, -1000)
	assert.Equal(t, 0.0, usd, "negative counts cost nothing")
	_, ok = Config{}.Cost(1, 1)
	assert.False(t, ok, "no prices: unknown, not zero")
}
