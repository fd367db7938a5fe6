package admit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One rule for what a number is: plain decimals, as a person writes them.
func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		err  string
	}{
		{"0.0625", 0.0625, ""}, {"6.25%", 0.0625, ""}, {"6.25e-2", 0.0625, ""}, {".5", 0.5, ""},
		{" 5% ", 0.05, ""}, {"0", 0, ""}, {"1", 1, ""}, {"100%", 1, ""},
		{"0x1p-4", 0, `not a rate "0x1p-4"`}, {"1_0%", 0, `not a rate "1_0%"`},
		{"NaN", 0, `not a rate "NaN"`}, {"Inf%", 0, `not a rate "Inf%"`}, {"", 0, "not a rate"},
		{"1.5", 0, "must be between 0 and 1, got 1.5"}, {"150%", 0, "must be between 0% and 100%, got 150%"},
		{"-0", 0, "must be between 0 and 1, got -0"},
	} {
		got, err := ParseRate(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.InDelta(t, tc.want, got, 1e-15, tc.in)
	}
}

// Counts have one cap, the log's: MaxTokens.
func TestParseCount(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""}, {"8000", 8000, ""}, {"2199023255552", 1 << 41, ""}, {"9007199254740991", MaxTokens, ""},
		{"9007199254740992", 0, "count over 9007199254740991"}, {"99999999999999999999", 0, "count over"},
		{"-1", 0, `negative count "-1"`}, {"-99999999999999999999", 0, "negative count"},
		{"1.5", 0, "not a whole number"}, {"1e3", 0, "not a whole number"}, {"0x10", 0, "not a whole number"},
		{"", 0, "empty count"}, {"-", 0, "not a whole number"},
	} {
		got, err := ParseCount(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestCostIsClamped(t *testing.T) {
	p := Prices{In: 2.5, Out: 10, CachedIn: 2.5, CacheWrite: 2.5}
	assert.InDelta(t, 0.0125, Cost(p, Usage{Prompt: 1000, Completion: 1000}), 1e-15)
	big := Prices{1e12, 1e12, 1e12, 1e12}
	assert.Equal(t, MaxUSD, Cost(big, Usage{Prompt: MaxTokens, Completion: MaxTokens, Cached: MaxTokens}))
	assert.Equal(t, 0.0, Cost(p, Usage{Prompt: -5, Completion: -5, Cached: -5, CacheWrite: -5}))
	assert.Equal(t, Cost(p, Usage{Prompt: 1000, Completion: 150000}), Reservation(p, 1000, 150000))
}

// Each part at its own price: Anthropic's 1.25× write and 0.1× read of
// $3 input. Parts past the prompt are cut to it, reads first.
func TestCostParts(t *testing.T) {
	p := Prices{In: 3, Out: 15, CachedIn: 0.3, CacheWrite: 3.75}
	usd := func(fresh, read, written, out float64) float64 {
		return (fresh*3 + read*0.3 + written*3.75 + out*15) / 1e6
	}
	assert.InDelta(t, usd(21, 0, 3979, 42), Cost(p, Usage{Prompt: 4000, Completion: 42, CacheWrite: 3979}), 1e-15)
	assert.InDelta(t, usd(21, 3979, 0, 42), Cost(p, Usage{Prompt: 4000, Completion: 42, Cached: 3979}), 1e-15)
	assert.InDelta(t, usd(0, 4000, 0, 0), Cost(p, Usage{Prompt: 4000, Cached: 5000, CacheWrite: 10}), 1e-15)
	assert.InDelta(t, usd(0, 1000, 3000, 0), Cost(p, Usage{Prompt: 4000, Cached: 1000, CacheWrite: 9000}), 1e-15)
	// Equal prices and no parts are bit for bit the old formula.
	in, out, prompt, completion := 0.15, 0.6, int64(1234), int64(567)
	q := Prices{In: in, Out: out, CachedIn: in, CacheWrite: in}
	assert.Equal(t, (float64(prompt)*in+float64(completion)*out)/1e6, Cost(q, Usage{Prompt: prompt, Completion: completion}))
}

// A first attempt's reservation assumes a cold cache: no input at the
// read price, all of it at the dearer of price_in and price_cache_write.
func TestReservationColdCache(t *testing.T) {
	p := Prices{In: 3, Out: 15, CachedIn: 0.3, CacheWrite: 3.75}
	assert.InDelta(t, 0.03, Reservation(p, 4000, 1000), 1e-15) // 4000 × $3.75 + 1000 × $15
	p.CacheWrite = 1                                           // a write cheaper than input: input's price stands
	assert.InDelta(t, 0.027, Reservation(p, 4000, 1000), 1e-15)
}

// The one "did you mean" of the command line, config keys, scripts and
// thresholds.
func TestClosest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cands []string
		want  string
	}{
		{"rehersal", []string{"rehearse", "report"}, "rehearse"}, // 3 edits in 8 letters
		{"wiat", []string{"wait", "model"}, "wait"},              // a swap is one edit
		{"base", []string{"name", "model"}, ""},                  // 2 edits in 4 letters is another word
		{"max_atempts", []string{"max_attempts", "max_wait"}, "max_attempts"},
		{"DEADLNE", []string{"deadline"}, "deadline"},
		{"sim", []string{"simulate", "seat"}, "simulate"}, // a prefix
		{"deadline", []string{"deadline"}, ""},            // itself is no suggestion
		{"ab", []string{"ac"}, ""},
	} {
		got, ok := Closest(tc.name, tc.cands)
		assert.Equal(t, tc.want, got, tc.name)
		assert.Equal(t, tc.want != "", ok, tc.name)
	}
	assert.Equal(t, 2, editDistance("abcd", "acbx"))
}

// A long mistyped name costs no more than its length allows.
func BenchmarkClosestLongName(b *testing.B) {
	long := string(make([]byte, 1<<20))
	for b.Loop() {
		_, _ = Closest(long, []string{"budget.deadline", "seats.x.kind"})
	}
}
