package cmd

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// simulate --vs B --html: both policies on the same axes, and every
// figure on the page is simulate --json's.
func TestSimulateHTML(t *testing.T) {
	page := filepath.Join(t.TempDir(), "sim.html")
	args := []string{"simulate", "--policy", "../testdata/models/two-attempts.yaml", "--vs", "../testdata/models/three-attempts.yaml",
		"--jobs", "300", "--rate", "20", "--model", "lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100 prompt=1500"}
	code, _, stderr := reportRun(t, false, "", append(args, "--html", page)...)
	require.Equal(t, 0, code, stderr)
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	html := string(b)
	for _, name := range []string{"sim-wait", "sim-elapsed", "sim-end-to-end", "sim-tokens", "sim-usd", "sim-cost-tokens", "sim-cost-usd"} {
		i := strings.Index(html, `data-chart="`+name+`"`)
		if assert.True(t, i >= 0, name) {
			chartSVG := html[i:]
			chartSVG = chartSVG[:strings.Index(chartSVG, "</figure>")]
			// Both policies are drawn on the one chart.
			assert.True(t, strings.Contains(chartSVG, ">two-attempts.yaml<") && strings.Contains(chartSVG, ">three-attempts.yaml<"), name)
		}
	}
	assert.True(t, strings.Contains(html, "two-attempts.yaml deadline"))
	figs := map[string]string{}
	for _, m := range regexp.MustCompile(`data-fig="([^"]+)" data-value="([^"]*)"`).FindAllStringSubmatch(html, -1) {
		figs[m[1]] = m[2]
	}
	assert.Contains(t, figs, "difference.success_rate")
	_, out, _ := reportRun(t, false, "", append(args, "--json")...)
	figsEqualJSON(t, figs, []byte(out))
}

// simulate --ramp --html draws each policy's load per step: first
// attempts and retries.
func TestSimulateHTMLSteps(t *testing.T) {
	page := filepath.Join(t.TempDir(), "sim.html")
	code, _, stderr := reportRun(t, false, "", "simulate", "--policy", "../testdata/models/storm.yaml", "--vs", "../testdata/models/storm-budget.yaml",
		"--ramp", "8,13,8/s", "--ramp-step", "30s", "--model", "lognormal p50=2s p99=8s 5xx=5% slots=24", "--html", page)
	require.Equal(t, 0, code, stderr)
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	html := string(b)
	for i, label := range []string{"storm.yaml", "storm-budget.yaml"} {
		name := "sim-steps-" + string(rune('0'+i))
		j := strings.Index(html, `data-chart="`+name+`"`)
		if assert.True(t, j >= 0, name) {
			svg := html[j:]
			svg = svg[:strings.Index(svg, "</figure>")]
			assert.Contains(t, svg, label+": attempts sent per step")
			assert.Contains(t, svg, ">retries<")
			assert.Contains(t, svg, ">1m0s<")
		}
	}
}
