package cmd

import (
	"strings"

	"github.com/retrygate/retrygate/admit"
)

// costParts are cost's --prices and --usage: one attempt's C from a rate
// card and its usage by part, through the one cost function
// (admit.Cost), as cost_usd is priced.
type costParts struct {
	Prices admit.Prices
	Usage  admit.Usage
}

// parseCostPrices reads --prices in=3,out=15[,cached_in=0.3][,cache_write=3.75]:
// USD per million tokens, each cache price in's when not given, as a
// seat's price_cached_in and price_cache_write default.
func parseCostPrices(s string) (admit.Prices, error) {
	var p admit.Prices
	given, err := eachPair("prices", s, "in=3,out=15,cached_in=0.3,cache_write=3.75", admit.ParseAmount,
		map[string]*float64{"in": &p.In, "out": &p.Out, "cached_in": &p.CachedIn, "cache_write": &p.CacheWrite})
	if !given["cached_in"] {
		p.CachedIn = p.In
	}
	if !given["cache_write"] {
		p.CacheWrite = p.In
	}
	return p, err
}

// parseCostTokens reads --usage prompt=4000,completion=400[,cached=3979][,cache_write=0]:
// cached and cache_write are parts of prompt, as in the log.
func parseCostTokens(s string) (admit.Usage, error) {
	var u admit.Usage
	_, err := eachPair("usage", s, "prompt=4000,completion=400,cached=3979,cache_write=0", admit.ParseCount,
		map[string]*int64{"prompt": &u.Prompt, "completion": &u.Completion, "cached": &u.Cached, "cache_write": &u.CacheWrite})
	if err == nil && u.Cached+u.CacheWrite > u.Prompt {
		return u, badInput("--usage: cached + cache_write (%d) is more than prompt (%d): they are parts of it", u.Cached+u.CacheWrite, u.Prompt)
	}
	return u, err
}

// eachPair reads a key=value list into parts, naming the flag and the
// pair at fault; given is the keys it read.
func eachPair[T any](flag, s, example string, parse func(string) (T, error), parts map[string]*T) (given map[string]bool, err error) {
	given = map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return given, badInput("--%s: %q: want key=value (e.g. %s)", flag, part, example)
		}
		if given[k] {
			return given, badInput("--%s: %q given twice", flag, k)
		}
		given[k] = true
		x, err := parse(strings.TrimSpace(v))
		if err != nil {
			return given, badInput("--%s: %s: %v", flag, k, err)
		}
		dst, known := parts[k]
		if !known {
			return given, badInput("--%s: unknown key %q (e.g. %s)", flag, k, example)
		}
		*dst = x
	}
	return given, nil
}
