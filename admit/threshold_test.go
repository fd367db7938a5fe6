package admit

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestThresholdParse(t *testing.T) {
	tests := []struct {
		metric, expr string
		agg          string
		p            float64
		op           string
		value        float64
		str          string
	}{
		{"wait_s", "p(95) < 5s", AggPercentile, 95, "<", 5, "p(95) < 5s"},
		{"wait_s", "p(95)<5", AggPercentile, 95, "<", 5, "p(95) < 5s"}, // bare = seconds, k6's spacing
		{"wait_s", "p(99.9) <= 1500ms", AggPercentile, 99.9, "<=", 1.5, "p(99.9) <= 1500ms"},
		{"elapsed_s", "max < 2m", AggMax, 0, "<", 120, "max < 2m"},
		{"elapsed_s", "avg>=0.5 s", AggAvg, 0, ">=", 0.5, "avg >= 0.5s"},
		{"ttfb_s", "med != 1", AggMed, 0, "!=", 1, "med != 1s"},
		{"ttfb_s", "min == 0", AggMin, 0, "==", 0, "min == 0s"},
		{"ttfb_s", "min === 0", AggMin, 0, "==", 0, "min == 0s"}, // k6's strict equality
		{"tokens", "p(99) <= 8000", AggPercentile, 99, "<=", 8000, "p(99) <= 8000"},
		{"tokens", "count >= 30", AggCount, 0, ">=", 30, "count >= 30"},
		{"attempts_per_success", "< 1.5", AggValue, 0, "<", 1.5, "< 1.5"},
		{"attempts_per_success", "value < 1.5", AggValue, 0, "<", 1.5, "< 1.5"},
		{"retry_tax", "< 25%", AggValue, 0, "<", 0.25, "< 25%"},
		{"retry_tax", "<0.25", AggValue, 0, "<", 0.25, "< 0.25"},
		{"refused_rate", "rate < 10%", AggRate, 0, "<", 0.1, "rate < 10%"},
		{"unknown_rate", "count == 0", AggCount, 0, "==", 0, "count == 0"},
		{"billable_failure_rate", "rate<0.5", AggRate, 0, "<", 0.5, "rate < 0.5"},
		{"deadline_miss_rate", " rate < 5e-2 ", AggRate, 0, "<", 0.05, "rate < 0.05"},
	}
	for _, tt := range tests {
		t.Run(tt.metric+" "+tt.expr, func(t *testing.T) {
			th, err := ParseThreshold(tt.metric, tt.expr)
			require.NoError(t, err)
			assert.Equal(t, tt.agg, th.Agg)
			assert.Equal(t, tt.p, th.P)
			assert.Equal(t, tt.op, th.Op)
			assert.InDelta(t, tt.value, th.Value, 1e-12)
			assert.Equal(t, tt.str, th.String())
			back, err := ParseThreshold(tt.metric, th.String())
			require.NoError(t, err)
			assert.InDelta(t, th.Value, back.Value, 1e-12)
		})
	}
}

// A typo must never become a threshold that cannot fail: every unknown
// piece is an error that names it.
func TestThresholdParseErrors(t *testing.T) {
	tests := []struct{ metric, expr, want string }{
		{"wiat_s", "p(95) < 5s", `unknown metric "wiat_s" (did you mean "wait_s"?`},
		{"latency", "p(95) < 5s", `unknown metric "latency" (metrics: wait_s,`},
		// Three edits from itl_s: not a typo of it under the one rule (Closest).
		{"abc_s", "p(95) < 5s", `unknown metric "abc_s" (metrics: wait_s,`},
		{"wait_s", "p95 < 5s", `unknown aggregation "p95" (did you mean p(95)?`},
		{"wait_s", "pct(95) < 5s", `unknown aggregation "pct(95)"`},
		{"wait_s", "p(95) =< 5s", `unknown operator "=<"`},
		{"wait_s", "p(95) <> 5s", `unknown operator "<>"`},
		{"wait_s", "p(95) = 5s", `unknown operator "="`},
		{"wait_s", "p(95) < 5sec", `unknown unit "sec"`},
		{"wait_s", "p(95) < 5h", `unknown unit "h"`},
		{"wait_s", "p(95) < 5%", `unit "%" does not apply to wait_s`},
		{"tokens", "p(95) < 5s", `unit "s" does not apply to tokens`},
		{"tokens", "p(95) < 5k", `unknown unit "k"`},
		{"refused_rate", "rate < 5", `value "5" is not a fraction`},
		{"refused_rate", "rate < 5ms", `unit "ms" does not apply to refused_rate`},
		{"retry_tax", "< 30", `value "30" is not a fraction`},
		{"wait_s", "rate < 5s", `aggregation "rate" does not apply to wait_s`},
		{"refused_rate", "p(95) < 5%", `aggregation "p(95)" does not apply to refused_rate`},
		{"refused_rate", "< 5%", `missing aggregation before "<"`},
		{"attempts_per_success", "avg < 1.5", `aggregation "avg" does not apply to attempts_per_success`},
		{"wait_s", "p(0) < 5s", `percentile "p(0)" is out of range`},
		{"wait_s", "p(101) < 5s", `percentile "p(101)" is out of range`},
		{"wait_s", "p(x) < 5s", `percentile "p(x)" is not a number`},
		{"wait_s", "p(95) 5s", `has no operator`},
		{"wait_s", "p(95) <", `missing value after "<"`},
		{"wait_s", "p(95) < fast", `value "fast" is not a number`},
		{"wait_s", "p(95) < -1s", `is negative`},
		{"wait_s", "p(95) < 1e400", `out of range`},
		{"tokens", "count > 2.5", `count "2.5" is not a whole number`},
		{"unknown_rate", "count == 1%", `unit "%" does not apply to count`},
		{"wait_s", "", `empty threshold`},
	}
	for _, tt := range tests {
		t.Run(tt.metric+" "+tt.expr, func(t *testing.T) {
			_, err := ParseThreshold(tt.metric, tt.expr)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestThresholdEval(t *testing.T) {
	waits := SortedValues{0.1, 0.5, 1.0, 1.5, 2.0, 3.0, 6.0, 12.0} // sorted
	tests := []struct {
		metric, expr string
		obs          Observed
		want         float64
		pass         bool
	}{
		{"wait_s", "p(95) < 5s", Observed{Values: waits}, 12, false},
		{"wait_s", "p(50) < 2s", Observed{Values: waits}, 1.5, true}, // nearest rank: 4th of 8
		{"wait_s", "p(75) <= 3s", Observed{Values: waits}, 3, true},  // equality passes <=
		{"wait_s", "med < 1.5", Observed{Values: waits}, 1.5, false},
		{"wait_s", "avg < 4", Observed{Values: waits}, 26.1 / 8, true},
		{"wait_s", "min == 0.1", Observed{Values: waits}, 0.1, true},
		{"wait_s", "max > 10", Observed{Values: waits}, 12, true},
		{"wait_s", "count >= 30", Observed{Values: waits}, 8, false},
		{"wait_s", "p(95) < 5s", Observed{}, math.NaN(), false}, // nothing measured cannot pass
		{"wait_s", "p(95) != 5s", Observed{}, math.NaN(), false},
		{"refused_rate", "rate < 30%", Observed{Num: 2, Den: 8}, 0.25, true},
		{"refused_rate", "rate < 20%", Observed{Num: 2, Den: 8}, 0.25, false},
		{"refused_rate", "rate == 0", Observed{}, 0, true}, // an empty population: nothing bad happened
		{"unknown_rate", "count == 0", Observed{Num: 1, Den: 5}, 1, false},
		{"attempts_per_success", "< 1.5", Observed{Value: 7.0 / 3}, 7.0 / 3, false},
		{"attempts_per_success", "< 1.5", Observed{Value: math.Inf(1)}, math.Inf(1), false},
		{"retry_ratio", "< 1.5", Observed{Value: math.NaN()}, math.NaN(), false},
		{"retry_tax", "< 50%", Observed{Value: 0.436}, 0.436, true},
	}
	for _, tt := range tests {
		t.Run(tt.metric+" "+tt.expr, func(t *testing.T) {
			th, err := ParseThreshold(tt.metric, tt.expr)
			require.NoError(t, err)
			got, pass := th.Eval(tt.obs)
			if math.IsNaN(tt.want) {
				assert.True(t, math.IsNaN(got), "got %v", got)
			} else {
				assert.InDelta(t, tt.want, got, 1e-12)
			}
			assert.Equal(t, tt.pass, pass)
		})
	}
}

func TestEveryMetricHasAnExample(t *testing.T) {
	for _, m := range Metrics {
		_, err := ParseThreshold(m.Name, example(m))
		require.NoError(t, err, m.Name)
		require.NotEmpty(t, m.Doc, m.Name)
	}
}

func FuzzThreshold(f *testing.F) {
	for _, s := range []string{"p(95) < 5s", "rate<0.01", "< 1.5", "count == 0", "avg>=0.5 s", "p(99.9) <= 1500ms",
		"med != 1", "max < 2m", "rate < 5%", "p(95) =< 5s", "p95<5", "value < 1e-3", "p(1e2)<1", "<<<", "p(()) < 1"} {
		for _, m := range []string{"wait_s", "tokens", "refused_rate", "retry_tax", "attempts_per_success"} {
			f.Add(m, s)
		}
	}
	f.Fuzz(func(t *testing.T, metric, expr string) {
		th, err := ParseThreshold(metric, expr)
		if err != nil {
			return
		}
		if math.IsNaN(th.Value) || math.IsInf(th.Value, 0) {
			t.Fatalf("%q parsed to a non-finite limit %v", expr, th.Value)
		}
		back, err := ParseThreshold(metric, th.String())
		if err != nil {
			t.Fatalf("%q → %q does not parse back: %v", expr, th.String(), err)
		}
		if back.Agg != th.Agg || back.P != th.P || back.Op != th.Op || back.Value != th.Value {
			t.Fatalf("%q → %q → %+v, want %+v", expr, th.String(), back, th)
		}
		// Evaluation never panics, whatever it is given.
		th.Eval(Observed{Values: SortedValues{1, 2, 3}, Num: 1, Den: 3, Value: 2})
		th.Eval(Observed{})
	})
}

// A share outside 0–100% can never decide anything: bad input.
func TestThresholdImpossibleShare(t *testing.T) {
	for _, c := range []struct{ metric, expr string }{
		{"refused_rate", "rate < 101%"},
		{"deadline_miss_rate", "rate > 150%"},
		{"retry_tax", "< 150%"},
		{"unknown_rate", "rate >= 100.5%"},
	} {
		_, err := ParseThreshold(c.metric, c.expr)
		require.ErrorContains(t, err, "is a share of 0%–100%", c.expr)
	}
	for _, ok := range []struct{ metric, expr string }{
		{"refused_rate", "rate <= 100%"}, {"retry_tax", "< 25%"}, {"unknown_rate", "count == 0"}, {"wait_s", "p(95) < 101"},
	} {
		_, err := ParseThreshold(ok.metric, ok.expr)
		require.NoError(t, err, ok.expr)
	}
}
