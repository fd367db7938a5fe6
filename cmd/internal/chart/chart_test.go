package chart

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// A distribution with many distinct values is drawn through at most
// MaxPoints steps and says so; a small one is drawn whole.
func TestCDFThinsOnlyTheDrawing(t *testing.T) {
	for _, c := range []struct {
		n       int
		sampled bool
	}{{50, false}, {MaxPoints, false}, {10_000, true}} {
		xs := make([]float64, c.n)
		for i := range xs {
			xs[i] = float64(i) / 1000
		}
		var b bytes.Buffer
		values := summary.SortedOf(xs...)
		require.NoError(t, CDF{Title: "t", XLabel: "wait (s)", Unit: "s", Series: []Series{{Name: "a", Values: values}}}.Write(&b))
		assert.Equal(t, c.sampled, Sampled(values), c.n)
		d := regexp.MustCompile(`class="cdf-line"[^>]* d="([^"]*)"`).FindStringSubmatch(b.String())
		require.Len(t, d, 2)
		steps := strings.Count(d[1], "H")
		assert.LessOrEqual(t, steps, MaxPoints+1, c.n)
		if !c.sampled {
			assert.Equal(t, c.n, steps)
		}
		assert.Equal(t, c.sampled, strings.Contains(b.String(), "at most 400 points"))
		// The line always reaches 100% at the largest value.
		assert.True(t, strings.HasSuffix(d[1], "V44"), d[1][max(0, len(d[1])-40):])
	}
}

func TestNiceTicks(t *testing.T) {
	ticks, a, b := niceTicks(0, 12, 8)
	assert.Equal(t, []float64{0, 2, 4, 6, 8, 10, 12}, ticks)
	assert.Equal(t, 0.0, a)
	assert.Equal(t, 12.0, b)
	ticks, _, b = niceTicks(0, 0, 8) // nothing to show still gives an axis
	assert.Equal(t, []float64{0, 1}, ticks)
	assert.Equal(t, 1.0, b)
}

// A rule far past the data is named at the edge, not drawn.
func TestRulePastTheData(t *testing.T) {
	var b bytes.Buffer
	err := CDF{Title: "t", XLabel: "wait (s)", Unit: "s", Series: []Series{{Name: "a", Values: summary.SortedOf(1, 2, 3)}},
		Rules: []Rule{{Label: "wait cap 5s", X: 5}, {Label: "deadline 45s", X: 45}}}.Write(&b)
	require.NoError(t, err)
	assert.Contains(t, b.String(), ">wait cap 5s</text>")
	assert.Contains(t, b.String(), ">deadline 45s →</text>")
	assert.Equal(t, 1, strings.Count(b.String(), `stroke-dasharray="5 3"`))
}

// Charts painted at once share no font face (a face keeps glyph caches
// that are not safe to share): under -race, and in the bytes.
func TestPNGAtOnce(t *testing.T) {
	scene := CDF{Title: "wait per seat", XLabel: "wait (s)", Unit: "s", Series: []Series{{Name: "a", Values: summary.SortedOf(1, 2, 3)}}}.Scene()
	outs := make([]bytes.Buffer, 4)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() { assert.NoError(t, WritePNG(&outs[i], scene, 2)) })
	}
	wg.Wait()
	for i := range outs {
		assert.Equal(t, outs[0].Bytes(), outs[i].Bytes(), i)
	}
}
