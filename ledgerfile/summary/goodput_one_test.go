package summary

import (
	"math"
	"testing"

	"github.com/retrygate/retrygate/admit"
)

// A threshold judges one attempt's value (oneValue) as it judges a
// one-value distribution, exactly, for every aggregation and operator.
func TestOneValueJudgesAsOneValueDistribution(t *testing.T) {
	exprs := []string{"p(95) < 5s", "p(100) > 2", "avg >= 3", "min == 4", "max != 5", "med < 1ms", "p(99.9) < 2", "count < 3", "< 2"}
	xs := []float64{0, 0.001, 0.0004, 1, 2, 2.0000001, 3, 4, 5, 0.1 + 0.2, 1e9}
	for _, e := range exprs {
		th, err := admit.ParseThreshold("wait_s", e)
		if err != nil {
			th, err = admit.ParseThreshold("attempts_per_success", e)
			if err != nil {
				t.Fatalf("%s: %v", e, err)
			}
		}
		for _, x := range xs {
			one := oneValue{decAmount(x), x}
			gv, gp := th.Eval(admit.Observed{Values: &one})
			wv, wp := th.Eval(admit.Observed{Values: SortedOf(x)})
			if gp != wp || !(gv == wv || math.IsNaN(gv) && math.IsNaN(wv)) {
				t.Errorf("%s on %v: got %v %v, a one-value distribution gives %v %v", e, x, gv, gp, wv, wp)
			}
		}
	}
}
