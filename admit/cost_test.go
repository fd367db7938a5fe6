package admit

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// The seed's numbers, to the digits the seed prints.
func TestCostSeedNumbers(t *testing.T) {
	tests := []struct {
		name   string
		got    float64
		want   float64
		digits int
	}{
		{"expected attempts f=0.05 n=3", ExpectedAttempts(0.05, 3), 1.0526, 4},
		{"ceiling f=0.05", AttemptsCeiling(0.05), 1.053, 3},
		{"ceiling f=0.2", AttemptsCeiling(0.2), 1.25, 2},
		{"timeout surcharge t=0.10", TimeoutSurcharge(1, 0.10), 1.10, 2},
		{"failover pre-generation", FailoverPreGeneration(0.004, 0.011, 0.03), 0.00433, 5},
		{"failover after timeout", FailoverAfterTimeout(0.004, 0.011, 0.03), 0.00445, 5},
		{"cost per success", CostPerSuccess(0.02, 1.4), 0.028, 3},
		{"cost per success, bad day", CostPerSuccess(0.02, 3), 0.06, 2},
		{"retry tax 1.4", RetryTax(1.4), 0.4, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scale := math.Pow(10, float64(tt.digits))
			assert.Equal(t, tt.want, math.Round(tt.got*scale)/scale)
		})
	}
}

func TestCostExpectedAttemptsEdges(t *testing.T) {
	assert.Equal(t, 1.0, ExpectedAttempts(0, 5), "no failures: one attempt")
	assert.Equal(t, 1.0, ExpectedAttempts(0.3, 0), "no retries: one attempt")
	assert.Equal(t, 1.0, ExpectedAttempts(0.3, -1), "negative retries read as none")
	assert.Equal(t, 4.0, ExpectedAttempts(1, 3), "every attempt fails: all n+1 are made")
	assert.InDelta(t, 1+0.5+0.25+0.125, ExpectedAttempts(0.5, 3), 1e-15)
}

// The closed form is the geometric sum it claims to be, and never passes its ceiling.
func TestCostExpectedAttemptsIsGeometricSum(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := rapid.Float64Range(0, 0.999).Draw(t, "f")
		n := rapid.IntRange(0, 60).Draw(t, "n")
		sum, p := 0.0, 1.0
		for i := 0; i <= n; i++ {
			sum += p
			p *= f
		}
		got := ExpectedAttempts(f, n)
		if math.Abs(got-sum) > 1e-9*sum {
			t.Fatalf("ExpectedAttempts(%g, %d) = %g, sum = %g", f, n, got, sum)
		}
		if got > AttemptsCeiling(f)*(1+1e-12) {
			t.Fatalf("ExpectedAttempts(%g, %d) = %g passes the ceiling %g", f, n, got, AttemptsCeiling(f))
		}
	})
}

func TestCostLayers(t *testing.T) {
	seed := []Layer{{"sdk", 3}, {"app", 3}, {"queue", 3}}
	assert.Equal(t, int64(27), LayersWorstCase(seed))
	assert.Equal(t, []string{"sdk", "app", "queue"}, RetryOwners(seed))
	assert.InDelta(t, 27, LayersExpectedCalls(seed, 1), 1e-12, "every call fails: the worst case")
	assert.Equal(t, 1.0, LayersExpectedCalls(seed, 0), "nothing fails: one call")

	// One layer is exactly seed 001's sum.
	assert.InDelta(t, ExpectedAttempts(0.05, 2), LayersExpectedCalls([]Layer{{"app", 3}}, 0.05), 1e-15)

	// Two layers by hand: the inner layer's failure rate is f² and the
	// outer one retries it, so calls = (1+f)·(1+f²).
	f := 0.3
	assert.InDelta(t, (1+f)*(1+f*f), LayersExpectedCalls([]Layer{{"sdk", 2}, {"app", 2}}, f), 1e-12)

	owned := []Layer{{"sdk", 1}, {"app", 3}, {"queue", 1}}
	assert.Equal(t, []string{"app"}, RetryOwners(owned))
	assert.Equal(t, int64(3), LayersWorstCase(owned))

	huge := []Layer{{"a", 1 << 30}, {"b", 1 << 30}, {"c", 1 << 30}}
	assert.Equal(t, int64(math.MaxInt64), LayersWorstCase(huge), "saturates, never wraps")
}

// Expected calls stay between one call and the worst case, and grow with f.
func TestCostLayersBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(t, "layers")
		var ls []Layer
		for i := range n {
			ls = append(ls, Layer{Name: string(rune('a' + i)), Attempts: rapid.IntRange(1, 5).Draw(t, "attempts")})
		}
		f := rapid.Float64Range(0, 0.99).Draw(t, "f")
		e := LayersExpectedCalls(ls, f)
		if e < 1-1e-12 || e > float64(LayersWorstCase(ls))+1e-9 {
			t.Fatalf("expected calls %g outside [1, %d]", e, LayersWorstCase(ls))
		}
		if e2 := LayersExpectedCalls(ls, math.Min(f+0.005, 0.995)); e2 < e-1e-12 {
			t.Fatalf("expected calls fell from %g to %g as f rose", e, e2)
		}
	})
}

func TestCostChecks(t *testing.T) {
	for _, v := range []float64{0, 0.05, 0.999} {
		require.NoError(t, CheckRate(v), v)
	}
	for _, tt := range []struct {
		v    float64
		want string
	}{
		{1, "must be below 1"},
		{1.5, "must be below 1"},
		{-0.1, "must not be negative"},
		{math.NaN(), "not a finite number"},
		{math.Inf(1), "not a finite number"},
	} {
		require.ErrorContains(t, CheckRate(tt.v), tt.want, tt.v)
	}
}
