package cmd

import (
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// The SVG images of a small fixed log are golden: any change to a chart
// shows up as a diff a reviewer can open (RETRYGATE_UPDATE_GOLDEN=1
// accepts it).
func TestReportSVGGolden(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := reportRun(t, false, "", "report", "--svg", dir, mixedLog)
	require.Equal(t, 0, code, stderr)
	names, err := filepath.Glob(filepath.Join(dir, "*.svg"))
	require.NoError(t, err)
	var got []string
	for _, n := range names {
		got = append(got, filepath.Base(n))
	}
	assert.Equal(t, []string{"cdf-elapsed.svg", "cdf-gen.svg", "cdf-ttfb.svg", "cdf-wait.svg", "cost-tokens.svg", "cost-usd.svg",
		"decisions.svg", "held-cdf-elapsed.svg", "held-cdf-ttfb.svg", "held-cdf-wait.svg", "hist-elapsed.svg", "hist-gen.svg",
		"hist-ttfb.svg", "hist-wait.svg", "job-tokens.svg", "job-usd.svg", "seat-rate.svg", "timeline.svg"}, got)
	for _, n := range got {
		b, err := os.ReadFile(filepath.Join(dir, n))
		require.NoError(t, err)
		golden(t, "html/mixed/"+n, string(b))
	}
}

// What a reader of mixed.log's page must be able to see: the figures are
// report --json's, p50/p95/p99 are marked, the caps are drawn, the failed
// and unknown jobs lead the timeline with the refusal's reason, job b's
// fallback attempt is marked, and held-out job f is apart.
func TestReportHTMLMixed(t *testing.T) {
	page := filepath.Join(t.TempDir(), "r.html")
	code, _, stderr := reportRun(t, false, "", "report", "--html", page, mixedLog)
	require.Equal(t, 0, code, stderr)
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	html := string(b)
	for _, want := range []string{
		`data-fig="all.jobs" data-value="6">6<`,
		`data-fig="all.unknown" data-value="1">1<`,
		`data-fig="all.retry_tax.tokens" data-value="2550">2550<`,
		`data-fig="all.retry_tax.tokens_share" data-value="0.35664335664335667">35.7%<`,
		`data-fig="all.attempts_per_success" data-value="2">2.00<`,
		`p95 12s`, `p50 1.5s`, // wait, (all)
		`wait cap 5s`, `deadline 45s`, // the config's defaults: mixed.log has no # policy line
		`has no <code># policy</code> line`,
		`refuse: queue wait`,
		`fallback cheap: wait 0.5s, gen 2.5s, ok`,
		`held-out rows`,
		`id="jobsearch"`,
	} {
		assert.True(t, strings.Contains(html, want), want)
	}
	// Failed d and unknown e lead the timeline, then the slowest succeeded.
	lanes := regexp.MustCompile(`class="lane" data-job="([^"]+)"`).FindAllStringSubmatch(html, -1)
	var order []string
	for _, l := range lanes {
		order = append(order, l[1])
	}
	assert.Equal(t, []string{"e", "d", "b", "f", "c", "a"}, order)
	// Self-contained: nothing fetched from anywhere.
	assert.NotRegexp(t, `(?i)(src|href)=|url\((?:'|")?http|@import`, html)
	assert.False(t, strings.Contains(html, `id="sampled"`))
}

// The policy in force comes from the log's # policy line, whichever way
// the reads split it, and its caps are the lines drawn.
func TestReportHTMLPolicyLine(t *testing.T) {
	src, err := os.ReadFile(mixedLog)
	require.NoError(t, err)
	pol := "# policy run=r1 budget.deadline=20s budget.token_ceiling=8000 budget.max_attempts=2 budget.max_wait=7s fallback=scratch,cheap hash=0123456789ab\n"
	log := "# run r1\n" + pol + string(src)
	for _, split := range []bool{false, true} {
		var w policyWatch
		var r io.Reader = strings.NewReader(log)
		if split {
			r = iotest.OneByteReader(r)
		}
		_, _, err := summary.ScanEvents(r, "p.log", false, func(*ledgerfile.Row) {}, nil, w.comment)
		require.NoError(t, err)
		want, ok := ledgerfile.ParsePolicy(pol)
		require.True(t, ok)
		assert.Equal(t, want, w.last)
		assert.Equal(t, 1, w.last.Run)
		assert.Equal(t, "7s", w.last.Get("budget.max_wait"))
		assert.Equal(t, []string{"0123456789ab"}, w.hashes)
	}
	path := filepath.Join(t.TempDir(), "p.log")
	require.NoError(t, os.WriteFile(path, []byte(log), 0o644))
	page := filepath.Join(t.TempDir(), "r.html")
	code, _, stderr := reportRun(t, false, "", "report", "--html", page, path)
	require.Equal(t, 0, code, stderr)
	b, _ := os.ReadFile(page)
	assert.True(t, strings.Contains(string(b), "wait cap 7s"), "wait cap 7s")
	assert.True(t, strings.Contains(string(b), "deadline 20s"), "deadline 20s")
	assert.True(t, strings.Contains(string(b), "the log&#39;s # policy line (hash 0123456789ab)"), "the log&#39;s # policy line (hash 0123456789ab)")
	assert.True(t, strings.Contains(string(b), "<code>fallback=<b>scratch,cheap</b></code>"), "<code>fallback=<b>scratch,cheap</b></code>")
}

// A log with more distinct values than a line is drawn through says so,
// and the figures stay exact.
func TestReportHTMLSampledSaysSo(t *testing.T) {
	var sb strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&sb, "ts=2025-06-02T10:00:%02dZ job=j%d attempt=1 seat=s wait_s=%d.%03d elapsed_s=%d.%03d tokens=10 outcome=ok decision=admit job_end=succeeded\n",
			i%60, i, i/1000, i%1000, 1+i/1000, i%1000)
	}
	path := filepath.Join(t.TempDir(), "big.log")
	require.NoError(t, os.WriteFile(path, []byte(sb.String()), 0o644))
	page := filepath.Join(t.TempDir(), "r.html")
	code, _, stderr := reportRun(t, false, "", "report", "--html", page, path)
	require.Equal(t, 0, code, stderr)
	b, _ := os.ReadFile(page)
	assert.True(t, strings.Contains(string(b), `id="sampled"`))
	assert.True(t, strings.Contains(string(b), `data-fig="groups.0.wait_s.p99" data-value="2.969">2.969<`))
}

func TestReportHTMLBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"report", "--html", "", mixedLog}, "--html: empty"},
		{[]string{"report", "--html", dir, mixedLog}, "is a directory"},
		{[]string{"report", "--html", "-", mixedLog}, "not written to stdout"},
		{[]string{"report", "--svg", mixedLog, mixedLog}, "--svg: " + strconv.Quote(mixedLog) + " is not a directory"},
		{[]string{"report", "--hist", "cfd", mixedLog}, "want wait, elapsed, tokens or cdf"},
	} {
		code, _, stderr := reportRun(t, false, "", c.args...)
		assert.Equal(t, 2, code, c.args)
		assert.Contains(t, stderr, c.want, c.args)
	}
	// A page is never left half-written, nor made for a log that fails.
	page := filepath.Join(dir, "r.html")
	code, _, _ := reportRun(t, false, "", "report", "--html", page, damagedLog)
	assert.Equal(t, 2, code)
	_, err := os.Stat(page)
	assert.True(t, os.IsNotExist(err))
}

// --hist cdf: the terminal CDFs under a sparkline row of report's own
// percentiles.
func TestReportHistCDF(t *testing.T) {
	code, out, stderr := reportRun(t, true, "", "report", "--hist", "cdf", mixedLog)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "CDFs of 8 sent attempts; max_wait = 5s from budget.max_wait (default)")
	assert.Contains(t, out, "wait_s (n=8)\n▂▃███ p50 1.500 p75 3.000 p95 12.000 p99 12.000 max 12.000\n")
	assert.Contains(t, out, "elapsed_s (n=8)\n▂▄███ p50 5.000 p75 12.000 p95 25.000 p99 25.000 max 25.000\n")
	assert.Contains(t, out, "^ max_wait 5s")
	code, _, stderr = reportRun(t, false, "", "report", "--hist", "cdf", "--json", mixedLog)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--hist draws for a terminal")
}

// jsonAt reads a dotted path (groups.0.wait_s.p95) out of decoded JSON.
func jsonAt(v any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[k]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// figsEqualJSON checks every data-fig on a page against report --json.
func figsEqualJSON(t *testing.T, figs map[string]string, reportJSON []byte) {
	t.Helper()
	var doc any
	require.NoError(t, json.Unmarshal(reportJSON, &doc))
	keys := make([]string, 0, len(figs))
	for k := range figs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		want, ok := jsonAt(doc, k)
		require.True(t, ok, "report --json has no %s", k)
		if want == nil {
			assert.Equal(t, "null", figs[k], k)
			continue
		}
		got, err := strconv.ParseFloat(figs[k], 64)
		require.NoError(t, err, k)
		assert.Equal(t, want, got, k)
	}
}

func TestReportHTMLFiguresAreReportJSONs(t *testing.T) {
	for _, log := range []string{mixedLog, "../testdata/golden/html/bad-day.log", "../testdata/logs/cache-expiry.log"} {
		page := filepath.Join(t.TempDir(), "r.html")
		code, _, stderr := reportRun(t, false, "", "report", "--html", page, log)
		require.Equal(t, 0, code, stderr)
		b, _ := os.ReadFile(page)
		figs := map[string]string{}
		for _, m := range regexp.MustCompile(`data-fig="([^"]+)" data-value="([^"]*)"`).FindAllStringSubmatch(string(b), -1) {
			figs[m[1]] = m[2]
		}
		if strings.Contains(log, "cache") {
			// The prompt cache's cards, on a log whose rows report parts.
			for _, k := range []string{"all.cache.cache_write_rate_on_retries", "all.cache.cached_share", "all.cache.saved_usd", "all.cache.retry_tax_usd_uncached"} {
				assert.Contains(t, figs, k)
			}
		} else {
			assert.NotContains(t, figs, "all.cache.cached_share", "no parts, no cache cards")
		}
		code, out, stderr := reportRun(t, false, "", "report", "--json", log)
		require.Equal(t, 0, code, stderr)
		figsEqualJSON(t, figs, []byte(out))
	}
}

// The breaker's open span comes from the log's `# event breaker` lines
// (closed → open to half-open → closed), through the summary, on the
// decisions chart.
func TestReportHTMLBreakerSpan(t *testing.T) {
	page := filepath.Join(t.TempDir(), "r.html")
	code, _, stderr := reportRun(t, false, "", "report", "--html", page, "../testdata/golden/rehearse/breaker-fallback.log")
	require.Equal(t, 0, code, stderr)
	b, _ := os.ReadFile(page)
	spans := regexp.MustCompile(`class="span"><rect x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)"[^>]*><title>([^<]*)</title>`).FindAllStringSubmatch(string(b), -1)
	require.Len(t, spans, 1)
	assert.Equal(t, "breaker open: breaker", spans[0][3])
	w, _ := strconv.ParseFloat(spans[0][2], 64)
	assert.Greater(t, w, 100.0) // open for most of the run
	assert.Less(t, w, 556.0)    // and closed before its end
}

// Breaker spans are the summary's: a note saying "breaker opened" is
// free text and draws nothing; `# event breaker` lines draw the span; a
// log with neither but with breaker-open refusals has the span inferred.
func TestReportHTMLBreakerSpansFromEventsNotNotes(t *testing.T) {
	dir := t.TempDir()
	rows := func(from, to int) string {
		var b strings.Builder
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, "ts=2026-01-01T00:%02d:00Z job=j%d attempt=1 seat=a wait_s=1 elapsed_s=1 tokens=1 outcome=ok job_end=succeeded\n", i, i)
		}
		return b.String()
	}
	refused := "ts=2026-01-01T00:20:00Z job=r1 attempt=1 seat=a wait_s=0 elapsed_s=0 tokens=0 decision=\"refuse: breaker open\" sent=false job_end=failed\n"
	for _, tc := range []struct{ name, log, want string }{
		{"notes only", rows(0, 10) + "ts=2026-01-01T00:10:00Z job=x attempt=1 seat=a wait_s=1 elapsed_s=1 tokens=1 outcome=server_error note=\"breaker opened\"\n" +
			rows(11, 30) + "ts=2026-01-01T00:30:00Z job=y attempt=1 seat=a wait_s=1 elapsed_s=1 tokens=1 outcome=ok note=\"half-open probe; breaker closed\"\n" + rows(31, 40), ""},
		{"events", rows(0, 10) + "# event breaker seat=a from=closed to=open ts=2026-01-01T00:10:00Z\n" + rows(11, 20) + refused +
			"# event breaker seat=a from=open to=half-open ts=2026-01-01T00:25:00Z\n# event breaker seat=a from=half-open to=closed ts=2026-01-01T00:30:00Z\n" + rows(31, 40), "breaker open: a"},
		{"refusals only", rows(0, 20) + refused + rows(21, 40), "breaker open (refusals): a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".log")
			require.NoError(t, os.WriteFile(log, []byte(tc.log), 0o644))
			page := filepath.Join(dir, "r.html")
			code, _, stderr := reportRun(t, false, "", "report", "--html", page, log)
			require.Equal(t, 0, code, stderr)
			b, _ := os.ReadFile(page)
			spans := regexp.MustCompile(`class="span"><rect [^>]*><title>([^<]*)</title>`).FindAllStringSubmatch(string(b), -1)
			if tc.want == "" {
				assert.Empty(t, spans)
				return
			}
			require.Len(t, spans, 1)
			assert.Equal(t, tc.want, spans[0][1])
		})
	}
}

// --png writes the same charts as --svg, painted at twice their size.
func TestReportPNG(t *testing.T) {
	svgDir, pngDir := t.TempDir(), filepath.Join(t.TempDir(), "png")
	code, _, stderr := reportRun(t, false, "", "report", "--svg", svgDir, "--png", pngDir, mixedLog)
	require.Equal(t, 0, code, stderr)
	svgs, _ := filepath.Glob(filepath.Join(svgDir, "*.svg"))
	require.Len(t, svgs, 18)
	for _, s := range svgs {
		name := strings.TrimSuffix(filepath.Base(s), ".svg")
		fh, err := os.Open(filepath.Join(pngDir, name+".png"))
		require.NoError(t, err, name)
		img, err := png.Decode(fh)
		fh.Close()
		require.NoError(t, err, name)
		src, _ := os.ReadFile(s)
		m := regexp.MustCompile(`width="(\d+)" height="(\d+)"`).FindStringSubmatch(string(src))
		w, _ := strconv.Atoi(m[1])
		h, _ := strconv.Atoi(m[2])
		assert.Equal(t, 2*w, img.Bounds().Dx(), name)
		assert.Equal(t, 2*h, img.Bounds().Dy(), name)
		// Something is painted in the palette's first colour (a series,
		// a bar), not only black text on white.
		blue := 0
		for y := 0; y < img.Bounds().Dy(); y += 2 {
			for x := 0; x < img.Bounds().Dx(); x += 2 {
				r, g, b, _ := img.At(x, y).RGBA()
				if r>>8 < 20 && g>>8 > 100 && g>>8 < 130 && b>>8 > 160 && b>>8 < 190 {
					blue++
				}
			}
		}
		assert.Positive(t, blue, name)
	}
}

// --by job makes a group per job: the page draws the 8 with the most
// rows beside (all), and says so.
func TestReportHTMLManyGroups(t *testing.T) {
	var sb strings.Builder
	for i := range 100 {
		for a := 1; a <= 1+i%3; a++ {
			fmt.Fprintf(&sb, "job=j%03d attempt=%d seat=s wait_s=0.%03d elapsed_s=1.000 tokens=10 outcome=ok decision=admit\n", i, a, i)
		}
	}
	path := filepath.Join(t.TempDir(), "jobs.log")
	require.NoError(t, os.WriteFile(path, []byte(sb.String()), 0o644))
	page := filepath.Join(t.TempDir(), "r.html")
	code, _, stderr := reportRun(t, false, "", "report", "--by", "job", "--html", page, path)
	require.Equal(t, 0, code, stderr)
	b, _ := os.ReadFile(page)
	html := string(b)
	assert.True(t, strings.Contains(html, `8 of 100 groups drawn`))
	i := strings.Index(html, `data-chart="cdf-wait"`)
	require.Positive(t, i)
	cdf := html[i : i+strings.Index(html[i:], "</figure>")]
	assert.Equal(t, 9, strings.Count(cdf, `class="cdf-line"`))  // 8 jobs and (all)
	assert.True(t, strings.Contains(cdf, `data-series="j002"`)) // three rows: among the largest
	assert.False(t, strings.Contains(cdf, `data-series="j000"`))
}

// --svg and --png name a directory with or without a trailing slash, as
// docs/report.md writes it, and create it when it is missing; a missing
// parent is still bad input.
func TestReportImageDirSlash(t *testing.T) {
	base := t.TempDir()
	for _, flag := range []string{"--svg", "--png"} {
		for _, name := range []string{"with-slash/", "without-slash"} {
			dir := filepath.Join(base, strings.TrimPrefix(flag, "--")+"-"+name)
			if strings.HasSuffix(name, "/") {
				dir += "/"
			}
			code, _, stderr := reportRun(t, false, "", "report", flag, dir, mixedLog)
			require.Equal(t, 0, code, "%s %s: %s", flag, dir, stderr)
			got, _ := filepath.Glob(filepath.Join(dir, "*."+strings.TrimPrefix(flag, "--")))
			assert.Len(t, got, 18, "%s %s", flag, dir)
		}
	}
	code, _, stderr := reportRun(t, false, "", "report", "--svg", filepath.Join(base, "no", "such")+"/", mixedLog)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "no such file or directory")
}

// The decisions chart draws what the tables count: a sent attempt the
// wait cap cut live is an attempt sent, not a refusal (it says refuse:
// queue wait, and counts under its outcome), so the chart's refusals
// are the table's.
func TestDecisionsChartCountsALiveCutAsSent(t *testing.T) {
	log := filepath.Join(t.TempDir(), "cut.log")
	require.NoError(t, os.WriteFile(log, []byte(`ts=2026-01-01T00:00:00Z job=a attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok decision=admit
ts=2026-01-01T00:00:01Z job=b attempt=1 seat=s wait_s=6 elapsed_s=6 tokens=10 outcome=wait_cap billing=ambiguous decision="refuse: queue wait"
ts=2026-01-01T00:00:08Z job=b attempt=2 seat=s wait_s=6 elapsed_s=6 tokens=10 decision="refuse: attempt cap" sent=false
`), 0o644))
	dir := t.TempDir()
	code, _, stderr := reportRun(t, false, "", "report", "--svg", dir, log)
	require.Equal(t, 0, code, stderr)
	b, err := os.ReadFile(filepath.Join(dir, "decisions.svg"))
	require.NoError(t, err)
	bars := regexp.MustCompile(`<title>[0-9:]+, ([^:<]+(?:: [a-z ]+)?): ([0-9]+)</title>`).FindAllStringSubmatch(string(b), -1)
	got := map[string]int{}
	for _, m := range bars {
		n, _ := strconv.Atoi(m[2])
		got[m[1]] += n
	}
	assert.Equal(t, map[string]int{"sent": 2, "refuse: attempt cap": 1}, got)
}
