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
	assert.InDelta(t, 0.0125, Cost(2.5, 10, 1000, 1000), 1e-15)
	assert.Equal(t, MaxUSD, Cost(1e12, 1e12, MaxTokens, MaxTokens))
	assert.Equal(t, 0.0, Cost(2.5, 10, -5, -5))
	assert.Equal(t, Cost(2.5, 10, 1000, 150000), Reservation(2.5, 10, 1000, 150000))
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
