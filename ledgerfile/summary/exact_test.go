package summary

import (
	"encoding/json"
	"fmt"
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
