package script

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
)

const seed002Path = "../../testdata/seats/seed002-shape.yaml"

// Seed 002's latency shape: p50 2.1s, p99 14s, 0.3% of calls never return.
func TestSeed002Shape(t *testing.T) {
	s, err := Load(seed002Path)
	require.NoError(t, err)
	require.Equal(t, 1000, s.Len())

	var returned []float64
	hangs := 0
	for i := range s.Len() {
		p := s.PlanFor(i)
		if p.Hang {
			hangs++
			continue
		}
		returned = append(returned, p.Elapsed.Seconds())
	}
	assert.Equal(t, 3, hangs, "0.3%% of 1000 calls never return")
	assert.False(t, slices.IsSorted(returned), "the calls come in a shuffled order")

	slices.Sort(returned)
	assert.InDelta(t, 2.1, admit.Percentile(returned, 50), 0.05, "p50 of the calls that return")
	assert.InDelta(t, 14, admit.Percentile(returned, 99), 0.3, "p99 of the calls that return")

	// Counting the hangs as the slowest calls of all gives the same shape.
	all := append(slices.Clone(returned), math.Inf(1), math.Inf(1), math.Inf(1))
	assert.InDelta(t, 2.1, admit.Percentile(all, 50), 0.05, "p50 of every call")
	assert.InDelta(t, 14, admit.Percentile(all, 99), 0.3, "p99 of every call")

	// Under a 25s hard timeout the hangs, and only they, time out.
	outcomes := map[admit.Outcome]int{}
	for i := range s.Len() {
		outcomes[seat.Resolve(s.PlanFor(i), 25*time.Second, 0, 10*time.Second).Outcome]++
	}
	assert.Equal(t, map[admit.Outcome]int{admit.OK: 996, admit.Timeout: 4}, outcomes,
		"the three hangs plus the slowest returned call (over 25s) time out")
}

// TestGenerateSeed002Shape rewrites testdata/seats/seed002-shape.yaml.
// The file is committed; regenerate with
//
//	RETRYGATE_UPDATE_GOLDEN=1 go test -run TestGenerateSeed002Shape ./rehearse/script/
func TestGenerateSeed002Shape(t *testing.T) {
	if os.Getenv("RETRYGATE_UPDATE_GOLDEN") != "1" {
		t.Skip("set RETRYGATE_UPDATE_GOLDEN=1 to regenerate " + seed002Path)
	}
	data := genSeed002(t)
	_, err := Parse(data, seed002Path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(seed002Path, data, 0o644))
}

// genSeed002 lays 997 elapsed times on a lognormal curve through
// (p50, 2.1s) and (p99, 14s), pins the nearest ranks those percentiles
// read — whether or not the three hangs are counted — to exactly 2.1s and
// 14s, and shuffles the calls with a fixed seed.
func genSeed002(t *testing.T) []byte {
	const (
		calls  = 1000
		hangs  = 3
		finite = calls - hangs
		p50    = 2.1
		p99    = 14.0
	)
	// Quantile (r−½)/n of the standard normal, for rank r of n.
	z := func(r int) float64 { return math.Sqrt2 * math.Erfinv(2*(float64(r)-0.5)/finite-1) }
	sigma := math.Log(p99/p50) / z(989)
	elapsed := make([]time.Duration, finite+1) // 1-based ranks
	for r := 1; r <= finite; r++ {
		secs := p50 * math.Exp(sigma*z(r))
		elapsed[r] = time.Duration(math.Round(secs*1000)) * time.Millisecond
	}
	// p50: rank 499 of the 997 that return, 500 of all 1000.
	// p99: rank 988 of 997, 990 of 1000 (the hangs sort last).
	for _, r := range []int{499, 500} {
		elapsed[r] = 2100 * time.Millisecond
	}
	for _, r := range []int{988, 989, 990} {
		elapsed[r] = 14 * time.Second
	}
	require.True(t, slices.IsSorted(elapsed[1:]), "pinning the percentiles kept the ranks in order")

	rng := rand.New(rand.NewPCG(2, 1))
	var lines []string
	for r := 1; r <= finite; r++ {
		e := elapsed[r]
		wait := time.Duration(float64(e) * (0.15 + 0.2*rng.Float64())).Round(time.Millisecond)
		wait = max(min(wait, e), time.Millisecond)
		prompt := 1200 + rng.IntN(601)
		completion := max(1, int(math.Round((e-wait).Seconds()*45)))
		lines = append(lines, fmt.Sprintf("  - {wait: %s, elapsed: %s, prompt_tokens: %d, completion_tokens: %d}\n",
			wait, e, prompt, completion))
	}
	for range hangs {
		lines = append(lines, fmt.Sprintf("  - {hang: true, prompt_tokens: %d}\n", 1200+rng.IntN(601)))
	}
	rng.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })

	var b bytes.Buffer
	b.WriteString(`# seed002-shape.yaml: seed 002's latency shape ("Timeouts, Retries,
# Fallbacks"): p50 elapsed 2.1s, p99 14s, and 0.3% of calls that never
# return. 1000 calls: 997 on a lognormal curve through those two
# percentiles (nearest rank, as admit.Percentile reads them, with or
# without the hangs counted), 3 hangs, in a fixed shuffled order. Waits
# are 15-35% of elapsed; completions stream at 45 tokens/s.
#
# Generated: do not edit. Regenerate with
#   RETRYGATE_UPDATE_GOLDEN=1 go test -run TestGenerateSeed002Shape ./rehearse/script/
name: seed002-shape
model: scratch
steps:
`)
	for _, l := range lines {
		b.WriteString(l)
	}
	return b.Bytes()
}
