package seat

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retrygate/retrygate/admit"
)

// A seat's cost is the gate's: clamped, like the reservation it is checked against.
func TestConfigCostIsTheGatesCost(t *testing.T) {
	c := Config{PriceIn: 1e12, PriceOut: 1e12}
	usd, ok := c.Cost(admit.Usage{Prompt: admit.MaxTokens, Completion: admit.MaxTokens})
	assert.True(t, ok)
	assert.Equal(t, admit.MaxUSD, usd)
	assert.Equal(t, admit.Reservation(c.Prices(), admit.MaxTokens, admit.MaxTokens), usd)
	usd, _ = Config{PriceIn: 2.5, PriceOut: 10}.Cost(admit.Usage{Prompt: -1000, Completion: -1000})
	assert.Equal(t, 0.0, usd, "negative counts cost nothing")
	_, ok = Config{}.Cost(admit.Usage{Prompt: 1, Completion: 1})
	assert.False(t, ok, "no prices: unknown, not zero")
}

// Unset cache prices are price_in: a config without them prices exactly
// as before, parts or not; set, each part is priced at its own rate.
func TestConfigCachePrices(t *testing.T) {
	u := admit.Usage{Prompt: 4000, Completion: 300, Cached: 3000, CacheWrite: 900}
	plain := Config{PriceIn: 3, PriceOut: 15}
	assert.Equal(t, admit.Prices{In: 3, Out: 15, CachedIn: 3, CacheWrite: 3}, plain.Prices())
	usd, _ := plain.Cost(u)
	in, out := plain.PriceIn, plain.PriceOut
	assert.Equal(t, (4000*in+300*out)/1e6, usd, "as price_in × prompt + price_out × completion")
	assert.Equal(t, usd, plain.UncachedCost(u))

	cached, write := 0.30, 3.75
	c := Config{PriceIn: 3, PriceOut: 15, PriceCachedIn: &cached, PriceCacheWrite: &write}
	usd, _ = c.Cost(u)
	// 100 fresh × $3 + 3000 read × $0.30 + 900 written × $3.75 + 300 out × $15, per million.
	assert.InDelta(t, 0.0003+0.0009+0.003375+0.0045, usd, 1e-15)
	assert.Equal(t, (4000*in+300*out)/1e6, c.UncachedCost(u))
	free := 0.0
	assert.True(t, Config{PriceCachedIn: &free, PriceCacheWrite: &write}.Priced())
}
