package summary

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

func streamRow(job string, wait, elapsed time.Duration, completion int64, outcome admit.Outcome) ledgerfile.Row {
	return ledgerfile.Row{
		TS: time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC), Job: job, Attempt: 1, Seat: "s",
		Wait: wait, Elapsed: elapsed, PromptTokens: 10, CompletionTokens: completion, Tokens: 10 + completion, HasSplit: true,
		Outcome: outcome, Decision: "admit", JobEnd: ledgerfile.JobSucceeded,
	}
}

func TestStreamFiguresTPOTAndOutputTPS(t *testing.T) {
	rows := []ledgerfile.Row{
		// (1.2 − 0.2) / (101 − 1) = 10ms per token; 101 / 1.2 s
		streamRow("a", 200*time.Millisecond, 1200*time.Millisecond, 101, admit.OK),
		// (2.2 − 0.2) / (51 − 1) = 40ms per token; 51 / 2.2 s
		streamRow("b", 200*time.Millisecond, 2200*time.Millisecond, 51, admit.OK),
		// one token: no TPOT, but an output rate
		streamRow("c", 100*time.Millisecond, 300*time.Millisecond, 1, admit.OK),
		// failures have neither
		streamRow("d", 100*time.Millisecond, 300*time.Millisecond, 50, admit.Timeout),
	}
	rows[3].JobEnd = ledgerfile.JobUnknown
	s := New(Options{})
	for i := range rows {
		s.Add(&rows[i], "t.log")
	}
	sum := s.Close()
	assert.Equal(t, int64(2), sum.Stream.TPOT.N)
	assert.InDelta(t, 0.010, float64(sum.Stream.TPOT.P50), 1e-12)
	assert.InDelta(t, 0.040, float64(sum.Stream.TPOT.Max), 1e-12)
	assert.Equal(t, int64(3), sum.Stream.OutputTPS.N)
	assert.InDelta(t, 101/1.2, float64(sum.Stream.OutputTPS.Max), 0.005) // counted to 0.01 tokens/s
	assert.InDelta(t, 51/2.2, float64(sum.Stream.OutputTPS.P50), 0.005)  // nearest rank: the middle of 3

	var ts []Threshold
	for metric, expr := range map[string]string{"tpot_s": "p(95) < 50ms", "output_tps": "min > 5"} {
		th, err := admit.ParseThreshold(metric, expr)
		require.NoError(t, err)
		ts = append(ts, Threshold{Threshold: th})
	}
	for _, r := range Evaluate(ts, sum) {
		switch r.Metric {
		case "tpot_s":
			assert.True(t, r.Pass, "%+v", r)
			assert.InDelta(t, 0.040, r.Value, 1e-12)
		case "output_tps":
			assert.False(t, r.Pass, "the one-token attempt ran at 3.3 tokens/s: %+v", r)
		}
	}
	_, err := admit.ParseThreshold("tpot", "p(95) < 50ms")
	assert.ErrorContains(t, err, "tpot", "a typo is refused as today")
}

func TestGoodputIsJobsMeetingEveryPerJobThresholdPerSecond(t *testing.T) {
	t0 := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	at := func(r ledgerfile.Row, s float64) ledgerfile.Row {
		r.TS = t0.Add(time.Duration(s * float64(time.Second)))
		return r
	}
	rows := []ledgerfile.Row{
		at(streamRow("a", 200*time.Millisecond, 1200*time.Millisecond, 101, admit.OK), 0), // good
		at(streamRow("b", 900*time.Millisecond, 2200*time.Millisecond, 51, admit.OK), 1),  // wait too long
		at(streamRow("c", 100*time.Millisecond, 300*time.Millisecond, 1, admit.OK), 2),    // no tpot: cannot show it met
		at(streamRow("d", 300*time.Millisecond, 800*time.Millisecond, 11, admit.OK), 3),   // good; ends at 3.8s
		at(streamRow("e", 100*time.Millisecond, 300*time.Millisecond, 50, admit.Timeout), 2),
	}
	rows[4].JobEnd = ledgerfile.JobUnknown
	var ts []Threshold
	for _, x := range [][2]string{{"wait_s", "p(95) < 500ms"}, {"tpot_s", "avg < 100ms"}, {"unknown_rate", "rate < 50%"}, {"goodput", "value > 0.5"}} {
		th, err := admit.ParseThreshold(x[0], x[1])
		require.NoError(t, err)
		ts = append(ts, Threshold{Threshold: th})
	}
	c, err := NewCheck(CheckOptions{Budget: admit.Budget{Deadline: time.Minute, TokenCeiling: 100000, MaxAttempts: 3, MaxWait: 5 * time.Second}, Thresholds: ts})
	require.NoError(t, err)
	for i := range rows {
		c.Add(&rows[i], "t.log")
	}
	res := c.Close()
	assert.Equal(t, Goodput{Good: 2, Jobs: 5, Share: 0.4, Window: 3800 * time.Millisecond, WindowS: 3.8, PerSecond: Figure(2 / 3.8)}, res.Goodput)
	for _, r := range res.Thresholds {
		if r.Metric == "goodput" {
			assert.InDelta(t, 2/3.8, r.Value, 1e-12)
			assert.True(t, r.Pass)
		}
	}
}

// check counts the streaming figures only when a threshold reads one,
// and a threshold on one judges what the whole summary shows.
func TestCheckCountsStreamFiguresWhenAThresholdReadsThem(t *testing.T) {
	rows := []ledgerfile.Row{
		streamRow("a", 200*time.Millisecond, 1200*time.Millisecond, 101, admit.OK),
		streamRow("b", 200*time.Millisecond, 2200*time.Millisecond, 51, admit.OK),
		streamRow("c", 100*time.Millisecond, 900*time.Millisecond, 21, admit.OK),
	}
	for i := range rows {
		rows[i].ITLMean, rows[i].ITLMax, rows[i].HasITL = time.Duration(i+1)*10*time.Millisecond, time.Duration(i+1)*30*time.Millisecond, true
	}
	full := New(Options{By: BySeat})
	for i := range rows {
		full.Add(&rows[i], "t.log")
	}
	whole := full.Close()
	check := func(metric, expr string) *CheckResult {
		th, err := admit.ParseThreshold(metric, expr)
		require.NoError(t, err)
		c, err := NewCheck(CheckOptions{Budget: admit.Budget{Deadline: time.Minute, TokenCeiling: 100000, MaxAttempts: 3, MaxWait: 5 * time.Second}, Thresholds: []Threshold{{Threshold: th}}})
		require.NoError(t, err)
		for i := range rows {
			c.Add(&rows[i], "t.log")
		}
		return c.Close()
	}
	for _, m := range []string{"tpot_s", "output_tps", "itl_s"} {
		require.True(t, StreamMetric(m))
		th, err := admit.ParseThreshold(m, "p(95) < 100")
		require.NoError(t, err)
		want := Evaluate([]Threshold{{Threshold: th}}, whole)[0]
		got := check(m, "p(95) < 100").Thresholds[0]
		assert.Equal(t, want.Value, got.Value, m)
		assert.Equal(t, want.N, got.N, m)
		assert.Equal(t, int64(3), got.N, m)
	}
	res := check("wait_s", "p(95) < 1s")
	assert.True(t, res.Pass)
	assert.Zero(t, res.Summary.Stream.TPOT.N, "no threshold reads the streaming figures: they are not counted")
}

// check counts only what its thresholds read (Options.OnlyGroups), and
// every threshold judges what the whole summary shows.
func TestCheckThresholdsReadAsTheWholeSummary(t *testing.T) {
	specs := [][2]string{
		{"wait_s", "p(95) < 5s"}, {"ttfb_s", "p(50) < 1s"}, {"elapsed_s", "max < 30s"}, {"tokens", "avg < 3000"},
		{"attempts_per_success", "< 1.5"}, {"retry_ratio", "< 2"}, {"retry_tax", "< 0.5"},
		{"refused_rate", "rate < 50%"}, {"unknown_rate", "count == 0"}, {"deadline_miss_rate", "rate < 10%"},
		{"billable_failure_rate", "rate < 50%"}, {"goodput", "value > 0.5"},
	}
	var ts []Threshold
	for _, x := range specs {
		th, err := admit.ParseThreshold(x[0], x[1])
		require.NoError(t, err, x[0])
		ts = append(ts, Threshold{Threshold: th})
	}
	for _, name := range []string{"../../testdata/logs/mixed.log", "../../testdata/logs/seed003.log", "../../testdata/golden/rehearse/bad-day.log", "../../testdata/golden/rehearse/breaker-fallback.log"} {
		rows, _, err := ledgerfile.ReadFile(name)
		require.NoError(t, err, name)
		opts := CheckOptions{Budget: admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 3, MaxWait: 5 * time.Second}, SlowAfter: 10 * time.Second, Thresholds: ts}
		lean, err := NewCheck(opts)
		require.NoError(t, err)
		whole, err := NewCheck(opts)
		require.NoError(t, err)
		whole.sum = New(Options{By: BySeat, SlowAfter: opts.SlowAfter, Deadline: opts.Budget.Deadline, Goodput: true, Thresholds: ts})
		for i := range rows {
			lean.Add(&rows[i], name)
			whole.Add(&rows[i], name)
		}
		got, want := lean.Close(), whole.Close()
		require.Len(t, got.Thresholds, len(specs))
		for i, w := range want.Thresholds {
			g := got.Thresholds[i]
			assert.Equal(t, w.Pass, g.Pass, "%s: %s", name, w.Metric)
			assert.Equal(t, w.N, g.N, "%s: %s", name, w.Metric)
			assert.Equal(t, w.Note, g.Note, "%s: %s", name, w.Metric)
			assert.Equal(t, math.Float64bits(w.Value), math.Float64bits(g.Value), "%s: %s: %v, want %v", name, w.Metric, g.Value, w.Value)
		}
		assert.Zero(t, got.Summary.Jobs.Time.Len(), "%s: the jobs' times are not counted", name)
		assert.NotZero(t, want.Summary.Jobs.Time.Len(), name)
	}
}
