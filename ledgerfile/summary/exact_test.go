package summary

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// A threshold at exactly the observed value decides the same way in
// every spelling of its unit: the log's three decimals against the
// threshold's own, equality admitting. 0.1 s to 30 s in 0.1 s steps, in
// ms, s, m and bare-number spellings, for every operator, over the
// run's aggregations and goodput's per-job test alike.
func TestThresholdsCompareExactDecimals(t *testing.T) {
	ops := []struct {
		op   string
		want func(c int) bool
	}{
		{"<=", func(c int) bool { return c <= 0 }}, {">=", func(c int) bool { return c >= 0 }},
		{"==", func(c int) bool { return c == 0 }}, {"<", func(c int) bool { return c < 0 }},
		{">", func(c int) bool { return c > 0 }}, {"!=", func(c int) bool { return c != 0 }},
	}
	parse := func(metric, expr string) Threshold {
		th, err := admit.ParseThreshold(metric, expr)
		if err != nil {
			t.Fatal(err)
		}
		return Threshold{Threshold: th, Where: expr}
	}
	budget := admit.Budget{Deadline: time.Hour, TokenCeiling: 1000, MaxAttempts: 1, MaxWait: time.Hour}
	for tenths := 1; tenths <= 300; tenths++ {
		ms := int64(tenths) * 100
		d := time.Duration(ms) * time.Millisecond
		row := ledgerfile.Row{Job: "j", Attempt: 1, Seat: "s", Wait: d, Elapsed: d, TTFB: d, HasTTFB: true, Tokens: 10,
			Outcome: admit.OK, Decision: "admit", JobEnd: ledgerfile.JobSucceeded}
		one := New(Options{})
		one.Add(&row, "t.log")
		s := one.Close()
		// The limit one step below, at, and one step above the value.
		for _, delta := range []int64{-100, 0, 100} {
			lim := ms + delta
			if lim <= 0 {
				continue
			}
			c := 0
			switch {
			case ms < lim:
				c = -1
			case ms > lim:
				c = 1
			}
			secs := strconv.FormatFloat(float64(lim)/1000, 'f', -1, 64)
			spellings := []string{strconv.FormatInt(lim, 10) + "ms", secs + "s", secs}
			if lim%600 == 0 {
				spellings = append(spellings, strconv.FormatFloat(float64(lim)/60000, 'f', -1, 64)+"m")
			}
			for _, op := range ops {
				want := op.want(c)
				for _, sp := range spellings {
					for _, metric := range []string{"wait_s", "elapsed_s", "ttfb_s"} {
						for _, agg := range []string{"p(50)", "max", "min", "med", "avg", "p(95)"} {
							expr := agg + " " + op.op + " " + sp
							th := parse(metric, expr)
							if res := Evaluate([]Threshold{th}, s)[0]; res.Pass != want {
								t.Fatalf("%s %s on a %.3f s value: pass=%v, want %v", metric, expr, float64(ms)/1000, res.Pass, want)
							}
						}
					}
					if delta != 0 || !strings.Contains(op.op, "=") || op.op == "!=" {
						continue // equality is where spellings parted
					}
					// goodput's per-job test, through check.
					th := parse("wait_s", "p(95) "+op.op+" "+sp)
					c, err := NewCheck(CheckOptions{Budget: budget, Thresholds: []Threshold{th}})
					if err != nil {
						t.Fatal(err)
					}
					c.Add(&row, "t.log")
					if good := c.Close().Goodput.Good == 1; good != want {
						t.Fatalf("goodput's per-job wait_s %s on a %.3f s value: good=%v, want %v", th.Source, float64(ms)/1000, good, want)
					}
				}
			}
		}
	}
}

// JSON writes the log's decimals: a 0.700 s wait is 0.7, not one ulp above.
func TestFiguresPrintTheLogsDecimals(t *testing.T) {
	s := New(Options{})
	for tenths := 1; tenths <= 300; tenths++ {
		d := time.Duration(tenths) * 100 * time.Millisecond
		s.Add(&ledgerfile.Row{Job: fmt.Sprint(tenths), Seat: "s", Wait: d, Elapsed: d, Tokens: 1, Outcome: admit.OK}, "t.log")
	}
	sum := s.Close()
	for i, v := range sum.All.Wait.Values.Values() {
		b, err := json.Marshal(Figure(v))
		require.NoError(t, err)
		assert.Equal(t, strconv.FormatFloat(float64(i+1)/10, 'f', -1, 64), string(b))
	}
	th, err := admit.ParseThreshold("wait_s", "max <= 700ms")
	require.NoError(t, err)
	b, err := json.Marshal(Evaluate([]Threshold{{Threshold: th}}, sum)[0])
	require.NoError(t, err)
	assert.Contains(t, string(b), `"limit":0.7,`)
}

func checkOf(t *testing.T, log string, thresholds map[string]string) *CheckResult {
	t.Helper()
	var ts []Threshold
	for metric, expr := range thresholds {
		ts = append(ts, Threshold{Threshold: mustThreshold(t, metric, expr), Where: metric})
	}
	c, err := NewCheck(CheckOptions{Budget: admit.Budget{Deadline: time.Hour, TokenCeiling: admit.MaxTokens, MaxAttempts: 10, MaxWait: time.Hour},
		Thresholds: ts})
	require.NoError(t, err)
	_, _, err = Scan(strings.NewReader(log), "t.log", false, func(r *ledgerfile.Row) { c.Add(r, "t.log") })
	require.NoError(t, err)
	return c.Close()
}

// avg is the exact mean of the decimals the rows wrote: 0.100 and 0.200
// average 0.15, not 0.15000000000000002, so `avg <= 150ms` holds and
// `avg < 450ms` over 0.300 and 0.600 does not.
func TestAvgIsTheExactMean(t *testing.T) {
	const log = "job=a wait_s=0.100 elapsed_s=0.300 tokens=1 outcome=ok\njob=b wait_s=0.200 elapsed_s=0.600 tokens=1 outcome=ok\n"
	res := checkOf(t, log, map[string]string{"wait_s": "avg <= 150ms"})
	require.Len(t, res.Thresholds, 1)
	assert.True(t, res.Thresholds[0].Pass, "avg 0.15 <= 150ms")
	assert.Equal(t, 0.15, *res.Thresholds[0].Observed)
	res = checkOf(t, log, map[string]string{"elapsed_s": "avg < 450ms"})
	assert.False(t, res.Thresholds[0].Pass, "avg 0.45 < 450ms does not hold")
	assert.Equal(t, 0.45, *res.Thresholds[0].Observed)
	res = checkOf(t, log, map[string]string{"elapsed_s": "avg == 0.45"})
	assert.True(t, res.Thresholds[0].Pass)
}

// The reader keeps what a row says to the microsecond, and so do the
// figures: a 0.4 ms wait is not 0, a 1.5 ms elapsed not 2 ms.
func TestSubMillisecondFiguresAreKept(t *testing.T) {
	const log = "job=a seat=s wait_s=0.0004 elapsed_s=0.0015 tokens=12 prompt_tokens=10 completion_tokens=2 outcome=ok\n"
	s := summarizeLog(t, log, Options{})
	assert.Equal(t, Figure(0.0004), s.All.Wait.Max)
	assert.Equal(t, Figure(0.0015), s.All.Elapsed.Max)
	assert.Equal(t, Figure(0.0011), s.Stream.TPOT.Max, "(0.0015 − 0.0004) ÷ (2 − 1)")
	assert.Equal(t, Figure(1333.33), s.Stream.OutputTPS.Max, "2 ÷ 0.0015, counted to 0.01 tokens/s")
	res := checkOf(t, log, map[string]string{"wait_s": "max > 0s"})
	assert.True(t, res.Thresholds[0].Pass, "a 0.4 ms wait is more than nothing")
	s = summarizeLog(t, "job=a seat=s wait_s=1.2345675 elapsed_s=2 tokens=1 outcome=ok\n", Options{})
	assert.Equal(t, Figure(1.234568), s.All.Wait.Max, "to the microsecond, half up")
}

// The retry tax in USD is the sum of the retries' own costs: a large
// kept total does not swallow a small tax.
func TestRetryTaxUSDIsTheRetriesCost(t *testing.T) {
	s := summarizeLog(t, `job=a seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok cost_usd=123456.789012
job=b attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=server_error cost_usd=0.000000001
job=b attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok cost_usd=99999.5
`, Options{})
	assert.Equal(t, Figure(1e-9), s.All.RetryTax.USD)
	assert.Equal(t, Figure(223456.289012001), s.All.USDTotal, "the total is exact too")
}

// A token sum that reaches admit.MaxTokens saturates; the retry tax is
// never negative, and a threshold that reads a saturated figure fails.
func TestSaturatedTokenSumsNeverGoNegative(t *testing.T) {
	log := "job=a seat=s wait_s=1 elapsed_s=2 tokens=" + strconv.FormatInt(admit.MaxTokens, 10) + " outcome=ok\n" +
		"job=b seat=s wait_s=1 elapsed_s=2 tokens=4300 outcome=ok\n"
	s := summarizeLog(t, log, Options{})
	assert.Zero(t, s.All.RetryTax.Tokens, "no retry in the log")
	assert.True(t, s.All.Saturated)
	assert.True(t, math.IsNaN(float64(s.All.RetryTax.TokensShare)), "a share of a saturated sum is unknown, not negative")
	res := checkOf(t, log, map[string]string{"retry_tax": "< 50%"})
	assert.False(t, res.Thresholds[0].Pass, "a share of a saturated sum cannot pass")
}
