package cmd

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const chromiumPath = "/usr/bin/chromium"

// browser finds Debian's chromium: the test runs wherever it is, must run
// in CI, and otherwise says how to run it.
func browser(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err == nil {
		return chromiumPath
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and %s is missing: .ci/run installs it (apt-get install -y --no-install-recommends chromium)", chromiumPath)
	}
	t.Skipf("%s is missing: install Debian's chromium (apt-get update && apt-get install -y --no-install-recommends chromium) to run the browser test", chromiumPath)
	return ""
}

// chartAxes are the axis labels each chart of the browser test's log must
// show, by chart name.
var chartAxes = map[string][]string{
	"cdf-wait":     {"wait: submit → first content byte (s)", "share of values at or under (%)"},
	"hist-wait":    {"wait: submit → first content byte (s) (bins of", "values (count)"},
	"cdf-ttfb":     {"ttfb: submit → response headers (s)", "share of values at or under (%)"},
	"hist-ttfb":    {"ttfb: submit → response headers (s) (bins of", "values (count)"},
	"cdf-elapsed":  {"elapsed: submit → last byte (s)", "share of values at or under (%)"},
	"hist-elapsed": {"elapsed: submit → last byte (s) (bins of", "values (count)"},
	"cdf-gen":      {"gen: elapsed − wait (s)", "share of values at or under (%)"},
	"hist-gen":     {"gen: elapsed − wait (s) (bins of", "values (count)"},
	"timeline":     {"seconds since the job's first submit (s)", "job"},
	"decisions":    {"time of submit (UTC)", "rows (count)"},
	"seat-rate":    {"time of submit (UTC)", "attempts per minute"},
	"cost-tokens":  {"seat", "tokens"},
	"cost-usd":     {"seat", "US dollars ($)"},
	"job-tokens":   {"tokens per job (tokens) (bins of", "values (count)"},
	"job-usd":      {"US dollars per job ($) (bins of", "values (count)"},
}

// TestReportHTMLInBrowser opens report --html's page in headless Chromium:
// every chart is there and drawn with its axes, the figures on the page
// are report --json's, and the page asks the network for nothing. It
// leaves a screenshot of the first screen (RETRYGATE_UPDATE_GOLDEN=1
// writes it to docs/report.png, the README's picture).
func TestReportHTMLInBrowser(t *testing.T) {
	exe := browser(t)
	dir := t.TempDir()
	log := "../testdata/golden/html/bad-day.log"
	page := filepath.Join(dir, "report.html")
	code, _, stderr := reportRun(t, false, "", "report", "--html", page, log)
	require.Equal(t, 0, code, stderr)
	code, jsonOut, stderr := reportRun(t, false, "", "report", "--json", log)
	require.Equal(t, 0, code, stderr)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.WindowSize(1320, 1000),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	var mu sync.Mutex
	var requests []string
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		var u string
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			u = e.Request.URL
		case network.EventRequestWillBeSent:
			u = e.Request.URL
		default:
			return
		}
		mu.Lock()
		requests = append(requests, u)
		mu.Unlock()
	}))
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()

	type chartInfo struct {
		Name   string   `json:"name"`
		Width  float64  `json:"width"`
		Height float64  `json:"height"`
		Shapes int      `json:"shapes"`
		Labels []string `json:"labels"`
	}
	url := "file://" + page
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitReady("#summary")))
	charts, err := chromedp.Run(ctx, chromedp.Evaluate[[]chartInfo](`[...document.querySelectorAll('figure.chart')].map(f => {
		const svg = f.querySelector('svg'); const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
		return {name: f.dataset.chart, width: r.width, height: r.height,
			shapes: svg ? svg.querySelectorAll('path.cdf-line, rect.bar, g.attempt, g.refusal, path.rate-line').length : 0,
			labels: svg ? [...svg.querySelectorAll('.axis-label')].map(e => e.textContent) : []};
	})`))
	require.NoError(t, err)
	figs, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll('[data-fig]')].map(e => [e.dataset.fig, e.dataset.value]))`))
	require.NoError(t, err)
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)

	got := map[string]chartInfo{}
	for _, c := range charts {
		got[c.Name] = c
	}
	for name, labels := range chartAxes {
		c, ok := got[name]
		if !assert.True(t, ok, "chart %s is missing", name) {
			continue
		}
		assert.Greater(t, c.Width, 100.0, "chart %s is not drawn", name)
		assert.Greater(t, c.Height, 100.0, "chart %s is not drawn", name)
		assert.Positive(t, c.Shapes, "chart %s draws nothing", name)
		require.Len(t, c.Labels, 2, name)
		for i, want := range labels {
			assert.True(t, strings.HasPrefix(c.Labels[i], want), "chart %s: axis label %q, want %q", name, c.Labels[i], want)
		}
	}

	// The figures on the page are report --json's.
	for _, k := range []string{"all.jobs", "all.succeeded", "all.unknown", "all.retry_tax.tokens", "all.retry_tax.usd"} {
		assert.Contains(t, figs, k)
	}
	figsEqualJSON(t, figs, []byte(jsonOut))

	// Nothing but the page itself was asked for.
	mu.Lock()
	assert.Contains(t, requests, url, "the listener saw no request, not even the page's")
	for _, r := range requests {
		assert.Equal(t, url, r, "the page made a request")
	}
	mu.Unlock()

	img, err := png.Decode(bytes.NewReader(shot))
	require.NoError(t, err)
	assert.Equal(t, 1320, img.Bounds().Dx())
	out := filepath.Join(dir, "report.png")
	if os.Getenv("RETRYGATE_UPDATE_GOLDEN") != "" {
		out = filepath.Join("..", "docs", "report.png")
		require.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755))
	}
	require.NoError(t, os.WriteFile(out, shot, 0o644))
	t.Logf("screenshot: %s", out)
}
