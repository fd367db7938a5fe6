package metrics_test

import (
	"bufio"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/proxy/metrics"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// expositionRows are rows of every kind the proxy writes: sent attempts
// of each outcome, with and without a cost or the token split, a
// fallback, refusals by several reasons, label values to escape.
func expositionRows() []ledgerfile.Row {
	t0 := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	sent := func(job string, attempt int, seatName, model string, o admit.Outcome, elapsed time.Duration) ledgerfile.Row {
		return ledgerfile.Row{
			TS: t0, Job: job, Attempt: attempt, Seat: seatName, Model: model, Elapsed: elapsed, Wait: elapsed / 4,
			Tokens: 30, PromptTokens: 20, CompletionTokens: 10, HasSplit: true, TokensFrom: "usage",
			Outcome: o, Billing: admit.BillingOf(o, 0, 0), CostUSD: 0.00125, HasCost: seatName == "up",
			HasSpent: true, Used: attempt - 1, Decision: "admit",
		}
	}
	rows := []ledgerfile.Row{
		sent("a", 1, "up", "gpt-4o-mini", admit.ServerError, 120*ms),
		sent("a", 2, "up", "gpt-4o-mini", admit.OK, 2300*ms),
		sent("b", 1, "up", `we"ird\model`, admit.RateLimited, 15*ms),
		sent("b", 2, "back", "cheap", admit.OK, 90*time.Second),
		sent("c", 1, "up", "gpt-4o-mini", admit.Timeout, 30*time.Second),
		sent("c", 2, "elsewhere", "x", admit.OK, 7*ms),
		{TS: t0, Job: "c", Attempt: 3, Seat: "up", Model: "gpt-4o-mini", Decision: "refuse: attempt cap", Unsent: true},
		{TS: t0, Job: "d", Attempt: 1, Seat: "up", Model: "gpt-4o-mini", Decision: "refuse: breaker open", Unsent: true},
	}
	rows[3].Fallback = true
	rows[4].HasSplit = false
	return rows
}

// The exposition of the retrygate_ and gen_ai_ families is exactly the
// one recorded in testdata/exposition.golden (written by
// client_golang when the proxy used it): names, HELP and TYPE lines,
// label order, series order, number format. RETRYGATE_UPDATE_GOLDEN=1
// rewrites it.
func TestExpositionGolden(t *testing.T) {
	m := metrics.New(metrics.Options{Chain: []seat.Config{
		{Name: "up", Kind: "openai", PriceIn: 0.15, PriceOut: 0.6}, {Name: "back", Kind: "anthropic"},
	}})
	sink := m.Sink(func([]ledgerfile.Row) error { return nil })
	require.NoError(t, sink(expositionRows()))
	failing := m.Sink(func([]ledgerfile.Row) error { return errors.New("disk full") })
	require.Error(t, failing(expositionRows()[:2]))
	require.NoError(t, sink(nil))
	m.Breaker("up", time.Now(), admit.Closed, admit.Open)
	m.Breaker("up", time.Now(), admit.Open, admit.HalfOpen)

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4; charset=utf-8"), resp.Header.Get("Content-Type"))
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "retrygate_") || strings.Contains(line, "gen_ai_") {
			b.WriteString(line + "\n")
		}
	}
	require.NoError(t, sc.Err())
	golden := filepath.Join("testdata", "exposition.golden")
	if os.Getenv("RETRYGATE_UPDATE_GOLDEN") != "" {
		require.NoError(t, os.WriteFile(golden, []byte(b.String()), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), b.String())
}

// The Go runtime's and the process's families are there, with their HELP
// and TYPE lines, as client_golang's collectors wrote them; a scrape
// that asks for gzip gets it.
func TestExpositionRuntimeFamilies(t *testing.T) {
	m := metrics.New(metrics.Options{Chain: []seat.Config{{Name: "up", Kind: "openai"}}})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(resp.Body)
		require.NoError(t, err)
		body = z
	}
	text, err := io.ReadAll(body)
	require.NoError(t, err)
	want, err := os.ReadFile(filepath.Join("testdata", "runtime_families.golden"))
	require.NoError(t, err)
	var got []string
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, "# HELP go_") || strings.HasPrefix(line, "# TYPE go_") ||
			strings.HasPrefix(line, "# HELP process_") || strings.HasPrefix(line, "# TYPE process_") {
			got = append(got, line)
		}
	}
	assert.Equal(t, strings.TrimSpace(string(want)), strings.Join(got, "\n"))
	for _, series := range []string{"go_goroutines ", "go_info{version=", `go_gc_duration_seconds{quantile="0.5"} `, "go_gc_duration_seconds_count ",
		"go_memstats_alloc_bytes ", "process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_start_time_seconds "} {
		assert.Contains(t, string(text), "\n"+series)
	}
	fams := scrape(t, srv.URL)
	assert.Greater(t, sum(fams, "go_goroutines", nil, false), 0.0)
	assert.Greater(t, sum(fams, "process_resident_memory_bytes", nil, false), 0.0)
}
