package summary

import (
	"fmt"
	"math"
	"math/big"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

func summarize(t *testing.T, path string, opts Options) *Summary {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	s := New(opts)
	_, _, err = Scan(f, path, false, func(r *ledgerfile.Row) { s.Add(r, path) })
	require.NoError(t, err)
	return s.Close()
}

func summarizeText(t *testing.T, text string, opts Options) *Summary {
	t.Helper()
	s := New(opts)
	_, _, err := Scan(strings.NewReader(text), "t.log", false, func(r *ledgerfile.Row) { s.Add(r, "t.log") })
	require.NoError(t, err)
	return s.Close()
}

func group(t *testing.T, s *Summary, key string) *Group {
	t.Helper()
	for _, g := range s.Groups {
		if g.Key == key {
			return g
		}
	}
	t.Fatalf("no group %q", key)
	return nil
}

func dist(t *testing.T, d Dist, n int64, p50, p75, p95, p99, max float64) {
	t.Helper()
	assert.Equal(t, n, d.N)
	assert.InDelta(t, p50, float64(d.P50), 1e-9, "p50")
	assert.InDelta(t, p75, float64(d.P75), 1e-9, "p75")
	assert.InDelta(t, p95, float64(d.P95), 1e-9, "p95")
	assert.InDelta(t, p99, float64(d.P99), 1e-9, "p99")
	assert.InDelta(t, max, float64(d.Max), 1e-9, "max")
}

// The figures below were worked out by hand at the top of mixed.log.
func TestSummaryMixedBySeat(t *testing.T) {
	s := summarize(t, "../../testdata/logs/mixed.log", Options{By: BySeat})
	require.Len(t, s.Groups, 2)
	assert.Equal(t, int64(9), s.Rows)

	sc := group(t, s, "scratch")
	assert.Equal(t, int64(8), sc.Rows)
	assert.Equal(t, int64(7), sc.Attempts)
	assert.Equal(t, int64(1), sc.Refused)
	assert.Equal(t, int64(1), sc.HeldOut)
	assert.Equal(t, int64(6), sc.Jobs)
	assert.Equal(t, [4]int64{3, 1, 1, 0}, [4]int64{sc.Succeeded, sc.Failed, sc.Unknown, sc.Cancelled})
	dist(t, sc.Wait, 7, 2, 6, 12, 12, 12)
	dist(t, sc.TTFB, 5, 0.5, 0.8, 1, 1, 1)
	dist(t, sc.Elapsed, 7, 9, 25, 25, 25, 25)
	dist(t, sc.Tokens, 7, 900, 1200, 1300, 1300, 1300)
	assert.Equal(t, map[string]int64{"ok": 3, "rate_limited": 1, "server_error": 1, "timeout": 2}, sc.Outcomes)
	assert.Equal(t, map[string]int64{"queue wait": 1}, sc.Refusals)
	assert.InDelta(t, 7.0/3, float64(sc.AttemptsPerSuccess), 1e-12)
	assert.InDelta(t, 7.0/6, float64(sc.RetryRatio), 1e-12)
	assert.Equal(t, int64(2550), sc.RetryTax.Tokens)
	assert.InDelta(t, 2550.0/6050, float64(sc.RetryTax.TokensShare), 1e-12)
	assert.InDelta(t, 0.0051, float64(sc.RetryTax.USD), 1e-12)
	assert.InDelta(t, 0.0051/0.0121, float64(sc.RetryTax.USDShare), 1e-9)
	assert.Equal(t, int64(3), sc.WastedCalls)
	assert.Equal(t, int64(4), sc.FailedAttempts)
	assert.Equal(t, int64(3), sc.BilledFailures)
	assert.InDelta(t, 0.75, float64(sc.BillableFailureRate), 1e-12)
	assert.InDelta(t, 1.0/6, float64(sc.UnknownRate), 1e-12)
	assert.InDelta(t, 1.0/6, float64(sc.FallbackRate), 1e-12)

	ch := group(t, s, "cheap")
	assert.Equal(t, int64(1), ch.Attempts)
	assert.Equal(t, int64(1), ch.Jobs)
	assert.Equal(t, int64(1), ch.Succeeded)
	assert.InDelta(t, 1, float64(ch.AttemptsPerSuccess), 1e-12)
	assert.Equal(t, int64(0), ch.RetryTax.Tokens)
	assert.InDelta(t, 1, float64(ch.FallbackRate), 1e-12)
	assert.True(t, math.IsNaN(float64(ch.BillableFailureRate)), "no failed attempts: undefined, not 0")

	all := s.All
	assert.Equal(t, int64(8), all.Attempts)
	assert.Equal(t, int64(6), all.Jobs)
	assert.Equal(t, [4]int64{4, 1, 1, 0}, [4]int64{all.Succeeded, all.Failed, all.Unknown, all.Cancelled})
	dist(t, all.Wait, 8, 1.5, 3, 12, 12, 12)
	dist(t, all.TTFB, 6, 0.4, 0.8, 1, 1, 1)
	dist(t, all.Elapsed, 8, 5, 12, 25, 25, 25)
	dist(t, all.Tokens, 8, 900, 1100, 1300, 1300, 1300)
	assert.InDelta(t, 2, float64(all.AttemptsPerSuccess), 1e-12)
	assert.InDelta(t, 8.0/6, float64(all.RetryRatio), 1e-12)
	assert.InDelta(t, 2550.0/7150, float64(all.RetryTax.TokensShare), 1e-12)
	assert.InDelta(t, 0.0051/0.0126, float64(all.RetryTax.USDShare), 1e-9)

	assert.Equal(t, []Wasted{
		{Seat: "scratch", Outcome: "rate_limited", Calls: 1, Tokens: 0, USD: 0},
		{Seat: "scratch", Outcome: "server_error", Calls: 1, Tokens: 800, USD: 0.0016},
		{Seat: "scratch", Outcome: "timeout", Calls: 1, Tokens: 900, USD: 0.0018},
	}, s.Wasted)

	// Per-job distributions for tune: a..f.
	assert.Equal(t, int64(6), s.Jobs.Jobs)
	assert.InDeltaSlice(t, []float64{4, 6.1, 9, 12, 25, 28.5}, s.Jobs.Time.Values(), 1e-9)
	// Time to success is the spend through the kept attempt: its elapsed
	// already holds its wait (a 4, b 25+0.5+3, c 0.1+1+5, f 9).
	assert.InDeltaSlice(t, []float64{4, 6.1, 9, 28.5}, s.Jobs.TimeToSuccess.Values(), 1e-9)
	assert.InDeltaSlice(t, []float64{800, 850, 1000, 1200, 1300, 2000}, s.Jobs.Tokens.Values(), 1e-9)
	assert.InDeltaSlice(t, []float64{1, 1, 2, 2}, s.Jobs.AttemptsPerSuccess.Values(), 1e-9)

	recs := Recommend(s, 0)
	require.Len(t, recs, 2)
	assert.InDelta(t, 5, float64(recs[0].Seconds), 1e-9) // p75 of ok elapsed 3 4 5 9
	assert.InDelta(t, 13.5, float64(recs[1].Low), 1e-9)
	assert.InDelta(t, 18, float64(recs[1].High), 1e-9)
	assert.Equal(t, int64(4), recs[0].Rows)
	assert.Contains(t, recs[0].Warning, "fewer than 30")
}

func TestSummaryGroupings(t *testing.T) {
	s := summarize(t, "../../testdata/logs/mixed.log", Options{By: ByOutcome})
	keys := []string{}
	for _, g := range s.Groups {
		keys = append(keys, g.Key)
	}
	assert.Equal(t, []string{"ok", "rate_limited", "refused", "server_error", "timeout"}, keys)
	assert.Equal(t, int64(4), group(t, s, "ok").Succeeded, "answers count where the kept attempt is")
	assert.Equal(t, int64(1), group(t, s, "refused").Refused)

	s = summarize(t, "../../testdata/logs/mixed.log", Options{By: ByJob})
	require.Len(t, s.Groups, 6)
	b := group(t, s, "b")
	assert.Equal(t, int64(2), b.Attempts)
	assert.Equal(t, int64(900), b.RetryTax.Tokens)
	assert.Equal(t, int64(1), b.WastedCalls)

	s = summarize(t, "../../testdata/logs/mixed.log", Options{By: ByModel})
	assert.Equal(t, int64(7), group(t, s, "gpt-4o-mini").Attempts)
	assert.Equal(t, int64(1), group(t, s, "llama3").Attempts)
}

func TestSummarySeed003(t *testing.T) {
	s := summarize(t, "../../testdata/logs/seed003.log", Options{})
	require.Len(t, s.Groups, 1)
	g := s.Groups[0]
	assert.Equal(t, NoValue, g.Key)
	assert.Equal(t, int64(1), g.Attempts)
	assert.Equal(t, int64(1), g.Refused)
	assert.Equal(t, int64(2), g.Jobs, "a row without a job id is a job of its own")
	assert.Equal(t, int64(1), g.Succeeded, "a sent row without outcome counts as ok")
	assert.Equal(t, int64(1), g.Failed)
	dist(t, g.Wait, 1, 1.2, 1.2, 1.2, 1.2, 1.2)
	assert.InDelta(t, 1, float64(g.AttemptsPerSuccess), 1e-12)
	assert.InDelta(t, 0.5, float64(g.RetryRatio), 1e-12)
	assert.Equal(t, int64(0), g.RetryTax.Tokens)
	assert.True(t, math.IsNaN(float64(g.RetryTax.USD)), "no costs: USD tax undefined")
	assert.Equal(t, map[string]int64{"queue wait": 1}, g.Refusals)
}

func TestSummaryWastedCallsSeed000(t *testing.T) {
	// Seed 000's query: attempts before the job's last attempt whose
	// outcome was not ok. Rows may arrive out of attempt order.
	s := summarizeText(t, `
job=x attempt=2 seat=b wait_s=1 elapsed_s=1 tokens=10 outcome=server_error
job=x attempt=1 seat=a wait_s=1 elapsed_s=1 tokens=10 outcome=timeout
job=x attempt=3 seat=b wait_s=1 elapsed_s=1 tokens=10 outcome=ok
job=y attempt=1 seat=a wait_s=1 elapsed_s=1 tokens=10 outcome=timeout
job=z attempt=1 seat=a wait_s=1 elapsed_s=1 tokens=10 outcome=rate_limited
job=z attempt=2 seat=a wait_s=1 elapsed_s=1 tokens=10 decision="refuse: attempt cap" sent=false
`, Options{})
	for _, w := range s.Wasted {
		assert.True(t, math.IsNaN(float64(w.USD)), "%s %s: no row has a cost: its USD is unknown, not 0", w.Seat, w.Outcome)
	}
	unknown := Figure(math.NaN())
	assert.Equal(t, fmt.Sprint([]Wasted{
		{Seat: "a", Outcome: "rate_limited", Calls: 1, Tokens: 10, USD: unknown},
		{Seat: "a", Outcome: "timeout", Calls: 1, Tokens: 10, USD: unknown},
		{Seat: "b", Outcome: "server_error", Calls: 1, Tokens: 10, USD: unknown},
	}), fmt.Sprint(s.Wasted), "y's only attempt is its last; z's refusal makes its 429 wasted")
	assert.Equal(t, int64(1), s.All.Unknown, "y ended on a timeout: unknown, not failed")
	assert.Equal(t, int64(1), s.All.Failed)
}

func TestSummaryKeptAnswerAndTax(t *testing.T) {
	// Two ok attempts in one job (a hedge): only the last is kept; the
	// earlier one is retry tax even though it succeeded.
	s := summarizeText(t, `
job=h attempt=1 seat=a wait_s=1 elapsed_s=2 tokens=100 outcome=ok cost_usd=0.01
job=h attempt=2 seat=a wait_s=1 elapsed_s=2 tokens=300 outcome=ok cost_usd=0.03 job_end=succeeded
`, Options{})
	assert.Equal(t, int64(100), s.All.RetryTax.Tokens)
	assert.InDelta(t, 0.25, float64(s.All.RetryTax.TokensShare), 1e-12)
	assert.InDelta(t, 0.01, float64(s.All.RetryTax.USD), 1e-12)
	assert.Equal(t, int64(1), s.All.Succeeded)
	assert.InDeltaSlice(t, []float64{2}, s.Jobs.AttemptsPerSuccess.Values(), 0)
}

func TestSummaryBillingDefaults(t *testing.T) {
	// Without a billing key, failures are classed by admit.BillingOf: a
	// slow 5xx (past SlowAfter) is ambiguous, so billed.
	s := summarizeText(t, `
wait_s=1 elapsed_s=12 tokens=10 outcome=server_error
wait_s=1 elapsed_s=1 tokens=10 outcome=server_error
wait_s=1 elapsed_s=1 tokens=10 outcome=rate_limited
wait_s=1 elapsed_s=1 tokens=10 outcome=reset
`, Options{SlowAfter: 10 * time.Second})
	assert.Equal(t, int64(4), s.All.FailedAttempts)
	assert.Equal(t, int64(2), s.All.BilledFailures)
	assert.Equal(t, int64(1), s.All.Unknown, "a last attempt billed ambiguous may have completed")
}

func TestSummarySince(t *testing.T) {
	since := time.Date(2025, 6, 2, 10, 3, 0, 0, time.UTC)
	s := summarize(t, "../../testdata/logs/mixed.log", Options{Since: since})
	assert.Equal(t, int64(4), s.Rows, "d1 d2 e1 f1")
	assert.Equal(t, int64(5), s.Before)

	s = summarizeText(t, "wait_s=1 elapsed_s=1 tokens=1\nts=2020-01-01T00:00:00Z wait_s=1 elapsed_s=1 tokens=1\n", Options{Since: since})
	assert.Equal(t, int64(1), s.Rows, "a row without ts is kept")
}

func TestSuggest(t *testing.T) {
	// tune reads only the rows not held out: mixed.log without job f.
	f, err := os.Open("../../testdata/logs/mixed.log")
	require.NoError(t, err)
	defer f.Close()
	sum := New(Options{})
	_, _, err = Scan(f, "mixed.log", false, func(r *ledgerfile.Row) {
		if !r.Holdout {
			sum.Add(r, "mixed.log")
		}
	})
	require.NoError(t, err)
	tuned, err := Suggest(sum.Close(), DefaultMargin)
	require.NoError(t, err)
	// The wait cap rests on the attempts that produced content (a1 1.0,
	// b2 0.5, c2 1.5: p95 1.5 × 1.25 → 1.9s), not on d1's slow 500, whose
	// 12 s "wait" is how long the error took: it is shown beside.
	assert.Equal(t, admit.Budget{Deadline: 35700 * time.Millisecond, TokenCeiling: 2500, MaxAttempts: 2,
		MaxWait: 1900 * time.Millisecond, MaxSpendUSD: 0.003}, tuned.Budget)
	assert.Equal(t, int64(3), tuned.Lines[0].Rows)
	assert.Equal(t, []Aside{
		{Outcome: "rate_limited", Rows: 1, WaitP95: 0.1},
		{Outcome: "server_error", Rows: 1, WaitP95: 12},
		{Outcome: "timeout", Rows: 2, WaitP95: 3},
	}, tuned.Aside)
	require.Len(t, tuned.Lines, 5)
	assert.InDelta(t, 28.5, tuned.Lines[1].Observed, 1e-9)
	assert.Equal(t, int64(3), tuned.Lines[1].Rows)
	assert.Contains(t, tuned.Lines[1].Warning, "3 jobs")

	_, err = Suggest(summarizeText(t, "wait_s=1 elapsed_s=1 tokens=1 outcome=timeout\n", Options{}), 1.25)
	require.ErrorContains(t, err, "no job succeeded")
	_, err = Suggest(summarizeText(t, "", Options{}), 1.25)
	require.ErrorContains(t, err, "no sent attempts")
	_, err = Suggest(summarizeText(t, "wait_s=1 elapsed_s=1 tokens=1\n", Options{}), 0.5)
	require.ErrorContains(t, err, "at least 1")
}

func TestCeilExact(t *testing.T) {
	for _, c := range []struct {
		x      string
		margin float64
		step   string
		want   float64
	}{
		{"28.5", 1.25, "0.1", 35.7}, {"15", 1, "0.1", 15}, {"2.1", 1, "0.1", 2.1}, {"0.7", 3, "0.1", 2.1}, {"2100", 1.25, "100", 2700},
		{"2000", 1.25, "100", 2500}, {"0.0024", 1.25, "0.0001", 0.003}, {"0.00001", 1, "0.0001", 0.0001}, {"0.1", 3, "0.1", 0.3},
	} {
		x, _ := new(big.Rat).SetString(c.x)
		assert.Equal(t, c.want, ceilExact(x, c.margin, c.step), "%s × %v / %s", c.x, c.margin, c.step)
	}
}

// tune's observed spend is the p99 of the jobs' USD as the rows wrote
// it: 0.02975955, not 0.02976 (the micro-dollar it was once counted to).
func TestSuggestObservedSpendIsExact(t *testing.T) {
	s := summarizeText(t, "job=a wait_s=1 elapsed_s=2 tokens=10 outcome=ok cost_usd=0.02975955\n", Options{})
	tuned, err := Suggest(s, DefaultMargin)
	require.NoError(t, err)
	require.Len(t, tuned.Lines, 5)
	assert.Equal(t, "max_spend_usd", tuned.Lines[4].Key)
	assert.Equal(t, 0.02975955, tuned.Lines[4].Observed)
	assert.Equal(t, 0.0372, tuned.Lines[4].Value, "0.02975955 × 1.25 = 0.0371994375, up to 0.0001")
	assert.Contains(t, tuned.Lines[4].Basis, "p99 USD per job 0.02975955 ")
}

func TestRecommendMaxTokens(t *testing.T) {
	// ok rows: wait 1, elapsed 5, 100 completion tokens → 25 tok/s pooled.
	s := summarizeText(t, `
wait_s=1 elapsed_s=5 tokens=300 prompt_tokens=200 completion_tokens=100 outcome=ok
wait_s=2 elapsed_s=6 tokens=300 prompt_tokens=200 completion_tokens=100 outcome=ok
`, Options{})
	recs := Recommend(s, 1000)
	require.Len(t, recs, 3)
	// ttft = p95 wait = 2; rate = 200 / 8 = 25 tok/s; 2 + 1000/25 = 42.
	assert.InDelta(t, 42, float64(recs[2].Seconds), 1e-9)
	assert.Equal(t, int64(2), recs[2].Rows)

	recs = Recommend(summarizeText(t, "wait_s=1 elapsed_s=5 tokens=300 outcome=ok\n", Options{}), 1000)
	assert.True(t, math.IsNaN(float64(recs[2].Seconds)), "no token split: no rate")
	assert.Equal(t, "no rows to rest on", recs[2].Warning)
}

func TestFigureJSON(t *testing.T) {
	for _, c := range []struct {
		f    Figure
		want string
	}{{Figure(math.NaN()), "null"}, {Figure(math.Inf(1)), "null"}, {1.5, "1.5"}, {0, "0"}} {
		b, err := c.f.MarshalJSON()
		require.NoError(t, err)
		assert.Equal(t, c.want, string(b))
	}
}

// Counted values are exact at the log's resolution: the same sorted
// list, the same nearest-rank percentiles, whether a value is small, one
// past the dense range, or a duration in nanoseconds (rounded as the log
// rounds it).
func TestValuesExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 3000).Draw(t, "n")
		gen := rapid.OneOf(
			rapid.Map(rapid.Int64Range(0, 30_000), func(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }),
			rapid.Map(rapid.Int64Range(0, 1e13), func(ns int64) time.Duration { return time.Duration(ns) }),
			rapid.Map(rapid.Int64Range(denseUnits-3, denseUnits+3), func(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }),
		)
		var vals values
		want := make([]float64, 0, n)
		for range n {
			d := gen.Draw(t, "d")
			vals.addDur(d)
			want = append(want, float64(d.Round(time.Microsecond)/time.Microsecond)/1e6) // the reader's resolution
		}
		slices.Sort(want)
		got := vals.sorted(secExp)
		if !slices.Equal(want, got.Values()) {
			t.Fatalf("counted values differ from the sorted list")
		}
		for _, p := range []float64{0, 1, 50, 75, 95, 99, 99.9, 100} {
			w, g := admit.Percentile(want, p), got.Percentile(p)
			if !(w == g || math.IsNaN(w) && math.IsNaN(g)) {
				t.Fatalf("p(%g): %g, want %g", p, g, w)
			}
		}
		if m := merge(got, got); m.Len() != 2*got.Len() || (n > 0 && m.Percentile(50) != got.Percentile(50)) {
			t.Fatalf("merging a distribution with itself changes its median")
		}

		// Amounts (USD) are counted as the decimals they are.
		var usd values
		amounts := make([]float64, 0, n)
		for range n {
			x := float64(rapid.IntRange(0, 5000).Draw(t, "cents")) / rapid.SampledFrom([]float64{100, 1e6, 1e9, 3}).Draw(t, "per")
			usd.addDec(decAmount(x))
			amounts = append(amounts, x)
		}
		slices.Sort(amounts)
		if !slices.Equal(amounts, usd.sorted(0).Values()) {
			t.Fatalf("counted amounts differ from the sorted list")
		}
	})
}

// Jobs may interleave (parallel rehearsals) and end at their job_end row;
// a job without one ends with the log. The figures do not depend on it.
func TestSummaryInterleavedJobs(t *testing.T) {
	s := summarizeText(t, `
job=a attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=timeout
job=b attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=rate_limited
job=c attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded
job=a attempt=2 seat=t wait_s=1 elapsed_s=2 tokens=20 outcome=ok fallback=true job_end=succeeded
job=d attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=server_error
job=b attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=30 outcome=ok job_end=succeeded
job=e attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded
job=d attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=server_error
`, Options{})
	all := s.All
	assert.Equal(t, int64(5), all.Jobs)
	assert.Equal(t, int64(4), all.Succeeded)
	assert.Equal(t, int64(1), all.Failed, "d never ended: it ends with the log, failed")
	assert.Equal(t, int64(3), all.WastedCalls, "a1 timeout, b1 429, d1 5xx")
	assert.Equal(t, int64(40), all.RetryTax.Tokens, "110 sent − 70 kept (c a2 b2 e): a1 b1 d1 d2")
	assert.Equal(t, int64(1), all.FallbackJobs)
	assert.Equal(t, int64(5), group(t, s, "s").Jobs, "a b c d e")
	assert.Equal(t, int64(1), group(t, s, "t").Jobs)
	assert.Equal(t, int64(1), group(t, s, "t").Succeeded, "a's answer came from t")
	assert.InDeltaSlice(t, []float64{1, 1, 2, 2}, s.Jobs.AttemptsPerSuccess.Values(), 0)
}

// The one deadline-miss rule: a refusal for the deadline (logged, or
// replayed), or a timeout cut at the end of what was left of the
// deadline. Note text is never read.
func TestDeadlineMissRule(t *testing.T) {
	s := summarizeText(t, `
job=a attempt=1 wait_s=1 elapsed_s=20 tokens=10 outcome=timeout
job=a attempt=2 wait_s=1 elapsed_s=20 tokens=10 outcome=timeout delay_s=5 job_end=unknown
job=b attempt=1 wait_s=1 elapsed_s=20 tokens=10 outcome=timeout job_end=unknown
job=c attempt=1 wait_s=1 elapsed_s=2 tokens=10 outcome=server_error
job=c attempt=2 wait_s=1 elapsed_s=2 tokens=10 decision="refuse: deadline" sent=false job_end=failed
job=d attempt=1 wait_s=1 elapsed_s=2 tokens=10 outcome=server_error note="also: deadline" job_end=failed
job=e attempt=1 wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded
`, Options{Deadline: 45 * time.Second})
	// a: 20 + 5 + 20 = 45 reaches 45s; b: 20 < 45; c refused for it; d's
	// note says "deadline" but nothing stopped it for the deadline.
	assert.Equal(t, int64(2), s.Jobs.DeadlineMisses)
	assert.InDelta(t, 0.4, float64(s.Jobs.DeadlineMissRate), 1e-12)

	// Under a replay, the replayed decision is the one judged.
	sum := New(Options{Deadline: 45 * time.Second})
	var r ledgerfile.Row
	require.NoError(t, ledgerfile.ParseLine([]byte(`job=f attempt=1 wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded`), &r))
	sum.add(&r, "x", "refuse: deadline", Refused(&r, "refuse: deadline"))
	got := sum.Close()
	assert.Equal(t, int64(1), got.Jobs.DeadlineMisses)
	assert.Equal(t, int64(1), got.RefusedRows)

	// A cut that lands a rounding's hair short of the deadline is a cut at
	// its end: the log keeps milliseconds.
	var cut ledgerfile.Row
	cut.Job, cut.Attempt, cut.Outcome, cut.Elapsed, cut.JobEnd = "g", 1, admit.Timeout, 45*time.Second-400*time.Microsecond, "unknown"
	sum = New(Options{Deadline: 45*time.Second + 500*time.Microsecond})
	sum.Add(&cut, "x")
	assert.Equal(t, int64(1), sum.Close().Jobs.DeadlineMisses)
}

// A summary made while rows are written equals the summary of the log
// they were written to: the loop's rows hold durations at what the
// writer writes (ledgerfile.Resolution), the summary counts them as the
// reader keeps them, so every figure a run reports is the figure check
// reads back.
func TestSummaryOfRowsEqualsSummaryOfTheirLog(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		deadline := time.Duration(rapid.IntRange(1, 60).Draw(t, "deadline_s")) * time.Second
		opts := Options{Deadline: deadline, SlowAfter: 10 * time.Second}
		live := New(opts)
		var log []byte
		ts := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		outcomes := []admit.Outcome{admit.OK, admit.Timeout, admit.ServerError, admit.RateLimited, admit.Reset, admit.WaitCap}
		for j := range rapid.IntRange(1, 30).Draw(t, "jobs") {
			n := rapid.IntRange(1, 4).Draw(t, "attempts")
			for a := 1; a <= n; a++ {
				dur := func(label string) time.Duration {
					return ledgerfile.Resolution(time.Duration(rapid.Int64Range(0, int64(30*time.Second)).Draw(t, label)))
				}
				wait := dur("wait")
				r := ledgerfile.Row{TS: ts, Job: "j" + strconv.Itoa(j), Attempt: a, Seat: "s" + strconv.Itoa(a%2),
					Wait: wait, Elapsed: wait + dur("gen"), Delay: dur("delay") / 10, Tokens: int64(rapid.IntRange(0, 3000).Draw(t, "tokens")),
					Outcome: rapid.SampledFrom(outcomes).Draw(t, "outcome"), Decision: "admit"}
				if rapid.IntRange(0, 9).Draw(t, "refused") == 0 {
					r.Outcome, r.Unsent, r.Decision = "", true, rapid.SampledFrom([]string{"refuse: deadline", "refuse: queue wait"}).Draw(t, "why")
				}
				if a == n || r.Outcome == admit.OK {
					r.JobEnd = ledgerfile.JobFailed
					if r.Outcome == admit.OK {
						r.JobEnd = ledgerfile.JobSucceeded
					}
					a = n
				}
				live.Add(&r, "t.log")
				log = ledgerfile.AppendRow(log, &r)
				ts = ts.Add(time.Duration(rapid.IntRange(1, 5000).Draw(t, "gap_ms")) * time.Millisecond)
			}
		}
		rows, _, err := ledgerfile.ReadAll(strings.NewReader(string(log)), "t.log")
		if err != nil {
			t.Fatal(err)
		}
		read := New(opts)
		for i := range rows {
			read.Add(&rows[i], "t.log")
		}
		a, b := live.Close(), read.Close()
		for _, m := range []string{"deadline_miss_rate", "unknown_rate", "refused_rate", "attempts_per_success", "wait_s", "elapsed_s", "tokens"} {
			oa, na := a.Observed(m)
			ob, nb := b.Observed(m)
			for _, expr := range []string{"rate >= 0", "value >= 0", "p(95) >= 0", "p(50) >= 0", "avg >= 0"} {
				th, err := admit.ParseThreshold(m, expr)
				if err != nil {
					continue
				}
				va, _ := th.Eval(oa)
				vb, _ := th.Eval(ob)
				if na != nb || !(va == vb || math.IsNaN(va) && math.IsNaN(vb)) {
					t.Fatalf("%s %s: %g over %d live, %g over %d from the log", m, expr, va, na, vb, nb)
				}
			}
		}
		if x, y := a.Jobs.EndToEnd.Percentile(99), b.Jobs.EndToEnd.Percentile(99); x != y {
			t.Fatalf("end to end p99: %g live, %g from the log", x, y)
		}
	})
}

// Figures with no unit of the log's (TPOT, output TPS) are counted at
// their resolution: a row's value rounded half up from its exact numbers,
// the same in the distribution as for the row alone, and the distinct
// values kept are bounded by the range.
func TestScaledValuesCountedAtTheirResolution(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New(Options{})
		var want []float64
		for i := range rapid.IntRange(0, 2000).Draw(t, "n") {
			wait := time.Duration(rapid.Int64Range(0, 50_000).Draw(t, "wait_us")) * time.Microsecond
			gen := time.Duration(rapid.Int64Range(0, 50_000).Draw(t, "gen_us")) * time.Microsecond
			r := ledgerfile.Row{Job: strconv.Itoa(i), Seat: "s", Wait: wait, Elapsed: wait + gen, Tokens: 12, PromptTokens: 10,
				CompletionTokens: rapid.Int64Range(2, 1000).Draw(t, "completion"), HasSplit: true, Outcome: admit.OK}
			x, ok := TPOT(&r)
			den := r.CompletionTokens - 1
			if u := (2*gen.Microseconds() + den) / (2 * den); !ok || x != float64(u)/1e6 {
				t.Fatalf("TPOT %g is not (%v − %v) ÷ %d to the microsecond, half up", x, r.Elapsed, r.Wait, den)
			}
			want = append(want, x)
			s.Add(&r, "t.log")
		}
		slices.Sort(want)
		g := s.Close().Stream.TPOT.Values
		if !slices.Equal(want, g.Values()) {
			t.Fatalf("values %v, want %v", g.Values(), want)
		}
		if len(g.vals) > 0.05*1e6+1 {
			t.Fatalf("%d distinct values kept for a range of %g units", len(g.vals), 0.05*1e6)
		}
	})
}

func TestGroupsListedTwiceCountOnce(t *testing.T) {
	// A key named twice in Options.Groups is one group, listed first; the
	// groups no one listed follow in key order.
	sum := New(Options{By: BySeat, Groups: []string{"b", "b", "a"}})
	for _, seat := range []string{"z", "c", "a"} {
		sum.Add(&ledgerfile.Row{TS: time.Unix(1, 0), Job: "j-" + seat, Attempt: 1, Seat: seat, Outcome: "ok", Elapsed: time.Second}, "x.log")
	}
	var keys []string
	for _, g := range sum.Close().Groups {
		keys = append(keys, g.Key)
	}
	assert.Equal(t, []string{"b", "a", "c", "z"}, keys)
	// With no rows at all, only the listed groups.
	assert.Len(t, New(Options{By: BySeat, Groups: []string{"b", "b"}}).Close().Groups, 1)
}
