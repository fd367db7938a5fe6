package cmd

import (
	"strings"

	"retrygate/admit"
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
	var cached, write bool
	err := eachPair("prices", s, "in=3,out=15,cached_in=0.3,cache_write=3.75", func(k, v string) error {
		f, err := admit.ParseAmount(v)
		if err != nil {
			return err
		}
		switch k {
		case "in":
			p.In = f
		case "out":
			p.Out = f
		case "cached_in":
			p.CachedIn, cached = f, true
		case "cache_write":
			p.CacheWrite, write = f, true
		default:
			return errUnknownPart
		}
		return nil
	})
	if !cached {
		p.CachedIn = p.In
	}
	if !write {
		p.CacheWrite = p.In
	}
	return p, err
}

// parseCostTokens reads --usage prompt=4000,completion=400[,cached=3979][,cache_write=0]:
// cached and cache_write are parts of prompt, as in the log.
func parseCostTokens(s string) (admit.Usage, error) {
	var u admit.Usage
	err := eachPair("usage", s, "prompt=4000,completion=400,cached=3979,cache_write=0", func(k, v string) error {
		n, err := admit.ParseCount(v)
		if err != nil {
			return err
		}
		switch k {
		case "prompt":
			u.Prompt = n
		case "completion":
			u.Completion = n
		case "cached":
			u.Cached = n
		case "cache_write":
			u.CacheWrite = n
		default:
			return errUnknownPart
		}
		return nil
	})
	if err == nil && u.Cached+u.CacheWrite > u.Prompt {
		return u, badInput("--usage: cached + cache_write (%d) is more than prompt (%d): they are parts of it", u.Cached+u.CacheWrite, u.Prompt)
	}
	return u, err
}

var errUnknownPart = badInput("unknown part")

// eachPair walks a key=value list, naming the flag and the pair at fault.
func eachPair(flag, s, example string, fn func(k, v string) error) error {
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return badInput("--%s: %q: want key=value (e.g. %s)", flag, part, example)
		}
		if seen[k] {
			return badInput("--%s: %q given twice", flag, k)
		}
		seen[k] = true
		if err := fn(k, strings.TrimSpace(v)); err == errUnknownPart {
			return badInput("--%s: unknown key %q (e.g. %s)", flag, k, example)
		} else if err != nil {
			return badInput("--%s: %s: %v", flag, k, err)
		}
	}
	return nil
}
