package summary

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// itlLog is a small log: three attempts with ITL (one failed mid-stream:
// sent attempts count whatever their outcome), one without (a single
// chunk), one refused before sending.
const itlLog = `ts=2026-03-14T09:00:00Z job=a attempt=1 seat=s wait_s=0.200 elapsed_s=1.200 itl_mean_s=0.020 itl_max_s=0.090 tokens=60 outcome=ok decision=admit job_end=succeeded
ts=2026-03-14T09:00:01Z job=b attempt=1 seat=s wait_s=0.200 elapsed_s=1.200 itl_mean_s=0.050 itl_max_s=0.300 tokens=60 outcome=ok decision=admit job_end=succeeded
ts=2026-03-14T09:00:02Z job=c attempt=1 seat=s wait_s=0.200 elapsed_s=0.900 itl_mean_s=0.150 itl_max_s=0.400 tokens=60 outcome=reset decision=admit job_end=unknown
ts=2026-03-14T09:00:03Z job=d attempt=1 seat=s wait_s=0.200 elapsed_s=0.210 tokens=11 outcome=ok decision=admit job_end=succeeded
ts=2026-03-14T09:00:04Z job=e attempt=1 seat=s wait_s=0.000 elapsed_s=0.000 tokens=11 outcome=ok decision="refuse: queue wait" sent=false job_end=failed
`

func itlSummary(t *testing.T) *Summary {
	t.Helper()
	s := New(Options{})
	for i, line := range strings.Split(strings.TrimSpace(itlLog), "\n") {
		var r ledgerfile.Row
		require.NoError(t, ledgerfile.ParseLine([]byte(line), &r), "line %d", i+1)
		r.Line = i + 1
		s.Add(&r, "t.log")
	}
	return s.Close()
}

func TestStreamFiguresITL(t *testing.T) {
	sum := itlSummary(t)
	assert.Equal(t, int64(3), sum.Stream.ITL.N, "the one-chunk and the unsent attempts have no ITL")
	assert.InDelta(t, 0.150, float64(sum.Stream.ITL.P95), 1e-12)
	assert.InDelta(t, 0.050, float64(sum.Stream.ITL.P50), 1e-12)
	assert.InDelta(t, 0.150, float64(sum.Stream.ITL.Max), 1e-12, "exact: each attempt's mean, not a histogram bucket")

	require.Len(t, sum.Groups, 1)
	for _, g := range []*Group{sum.Groups[0], sum.All} {
		require.NotNil(t, g.ITL, "report --json shows itl_s per group")
		assert.Equal(t, int64(3), g.ITL.N)
		assert.InDelta(t, 0.050, float64(g.ITL.P50), 1e-12)
	}

	eval := func(expr string) ThresholdResult {
		th, err := admit.ParseThreshold("itl_s", expr)
		require.NoError(t, err)
		rs := Evaluate([]Threshold{{Threshold: th}}, sum)
		require.Len(t, rs, 1)
		return rs[0]
	}
	pass := eval("p(95) < 200ms")
	assert.True(t, pass.Pass, "%+v", pass)
	assert.InDelta(t, 0.150, pass.Value, 1e-12)
	fail := eval("p(50) < 40ms")
	assert.False(t, fail.Pass, "%+v", fail)
	assert.InDelta(t, 0.050, fail.Value, 1e-12)

	old := New(Options{})
	r := ledgerfile.Row{Job: "x", Attempt: 1, Seat: "s", Outcome: admit.OK, Decision: "admit"}
	old.Add(&r, "old.log")
	assert.Nil(t, old.Close().All.ITL, "a log without itl keys has no itl_s in report --json")

	_, err := admit.ParseThreshold("itl", "p(95) < 200ms")
	assert.ErrorContains(t, err, "itl", "a typo is refused as today")
}

// ITL counted as every duration reads back as exactly the values ITL
// gives each row, sum and all, whatever nanoseconds a row carries.
func TestITLValuesAreEachRowsITL(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	s := New(Options{})
	var want []float64
	var sum int64 // µs
	for i := range 5000 {
		r := ledgerfile.Row{Job: fmt.Sprint(i), Attempt: 1, Seat: "s", Outcome: admit.OK, Decision: "admit", JobEnd: ledgerfile.JobSucceeded,
			HasITL: i%7 != 0, ITLMean: time.Duration(rng.Int64N(int64(40 * time.Second)))}
		if x, ok := ITL(&r); ok {
			want = append(want, x)
			sum += r.ITLMean.Round(time.Microsecond).Microseconds()
		}
		s.Add(&r, "t.log")
	}
	got := s.Close()
	slices.Sort(want)
	mean := big.NewRat(sum, int64(len(want))*1e6)
	for _, d := range []Sorted{got.Stream.ITL.Values, got.All.ITL.Values, got.Groups[0].ITL.Values} {
		assert.Equal(t, want, d.Values())
		assert.Zero(t, mean.Cmp(d.MeanRat()), "the exact mean of the values ITL gives")
	}
}
