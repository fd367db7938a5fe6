package cmd

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

const policies = "../testdata/policies/"

func TestCheckExitCodes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		err  string // in stderr
	}{
		{"pass", []string{"check", "--policy", policies + "pass.yaml", mixedLog}, ExitOK, ""},
		{"thresholds and held-out fail", []string{"check", "--policy", policies + "tight.yaml", mixedLog}, ExitRefuse, ""},
		{"held-out refused, thresholds pass", []string{"check", "--policy", policies + "seed003.yaml", seedHoldLog}, ExitRefuse, ""},
		{"typo in a metric", []string{"check", "--policy", policies + "typo-metric.yaml", mixedLog}, ExitBad,
			`typo-metric.yaml:3: thresholds.wiat_s: unknown metric "wiat_s" (did you mean "wait_s"?`},
		{"typo in an aggregation", []string{"check", "--policy", policies + "typo-agg.yaml", mixedLog}, ExitBad,
			`typo-agg.yaml:3: thresholds.wait_s: threshold "p95 < 5s": unknown aggregation "p95" (did you mean p(95)?`},
		{"typo in an operator", []string{"check", "--policy", policies + "typo-op.yaml", mixedLog}, ExitBad,
			`typo-op.yaml:3: thresholds.wait_s: threshold "p(95) =< 5s": unknown operator "=<"`},
		{"typo in a unit", []string{"check", "--policy", policies + "typo-unit.yaml", mixedLog}, ExitBad,
			`typo-unit.yaml:3: thresholds.wait_s: threshold "p(95) < 5sec": unknown unit "sec"`},
		{"no thresholds: fails closed", []string{"check", "--policy", policies + "no-thresholds.yaml", mixedLog}, ExitBad,
			"no-thresholds.yaml: no thresholds: a check that judges nothing cannot pass"},
		{"an empty list", []string{"check", "--policy", policies + "empty-list.yaml", mixedLog}, ExitBad,
			"empty-list.yaml:3: thresholds.wait_s: an empty list judges nothing"},
		{"an impossible rate", []string{"check", "--policy", policies + "impossible-rate.yaml", mixedLog}, ExitBad,
			`impossible-rate.yaml:3: thresholds.refused_rate: threshold "rate < 101%": refused_rate is a share of 0%–100%`},
		{"no policy", []string{"check", mixedLog}, ExitBad, "no policy file: pass --policy FILE"},
		{"missing policy", []string{"check", "--policy", "nope.yaml", mixedLog}, ExitBad, `config "nope.yaml": no such file or directory`},
		{"missing log", []string{"check", "--policy", policies + "pass.yaml", "nope.log"}, ExitBad, `failed to open log "nope.log"`},
		{"malformed row", []string{"check", "--policy", policies + "pass.yaml", damagedLog}, ExitBad, "line 8: wait_s: not a number"},
		{"policy and config differ", []string{"--config", policies + "tight.yaml", "check", "--policy", policies + "pass.yaml", mixedLog}, ExitBad,
			"name different files"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := reportRun(t, false, "", tt.args...)
			assert.Equal(t, tt.code, code, errOut)
			if tt.err != "" {
				assert.Contains(t, errOut, tt.err)
			}
		})
	}
}

func TestCheckGolden(t *testing.T) {
	tests := []struct {
		name string
		tty  bool
		code int
		args []string
	}{
		{"check/pass.txt", false, ExitOK, []string{"check", "--policy", policies + "pass.yaml", mixedLog}},
		{"check/tight.table", true, ExitRefuse, []string{"check", "--policy", policies + "tight.yaml", mixedLog}},
		{"check/tight.json", false, ExitRefuse, []string{"check", "--policy", policies + "tight.yaml", "--json", mixedLog}},
		{"check/seed003-holdout.txt", false, ExitRefuse, []string{"check", "--policy", policies + "seed003.yaml", seedHoldLog}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, _ := reportRun(t, tt.tty, "", tt.args...)
			require.Equal(t, tt.code, code)
			golden(t, tt.name, out)
		})
	}
}

// Each threshold's observed value, worked by hand at the top of mixed.log.
func TestCheckObservedValues(t *testing.T) {
	code, out, _ := reportRun(t, false, "", "check", "--policy", policies+"pass.yaml", "--json", mixedLog)
	require.Equal(t, ExitOK, code)
	var got checkJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	want := map[string]float64{
		"wait_s p(50) < 2s":                1.5,
		"wait_s p(99) < 15s":               12,
		"ttfb_s p(95) < 1500ms":            1,
		"elapsed_s p(95) <= 25s":           25,
		"tokens max < 8000":                1200,
		"attempts_per_success < 2.5":       7.0 / 3,
		"retry_ratio < 1.5":                1.4,
		"retry_tax < 50%":                  2550.0 / 5850,
		"refused_rate rate < 30%":          0.25, // d1 flips, d2 stays refused: its wait estimate is d1's 12 s (mixed.log's header)
		"unknown_rate rate <= 20%":         0.2,
		"deadline_miss_rate rate == 0":     0,
		"billable_failure_rate rate < 80%": 0.75,
	}
	require.Len(t, got.Thresholds, len(want))
	for _, r := range got.Thresholds {
		key := r.Metric + " " + r.Threshold
		require.Contains(t, want, key)
		require.NotNil(t, r.Observed, key)
		assert.InDelta(t, want[key], *r.Observed, 1e-9, key)
		assert.True(t, r.Pass, key)
	}
	assert.True(t, got.Pass)
	assert.Equal(t, int64(8), got.Rows)
	assert.Equal(t, int64(5), got.Jobs)
	assert.Equal(t, int64(1), got.HeldOutRows)
	assert.Equal(t, int64(1), got.ChangesTotal)
	assert.Equal(t, 70, got.Changes[0].Line)
	assert.Empty(t, got.HeldOutRefused)
}

func TestCheckHeldOutRowShown(t *testing.T) {
	code, out, _ := reportRun(t, false, "", "check", "--policy", policies+"seed003.yaml", seedHoldLog)
	require.Equal(t, ExitRefuse, code)
	assert.Contains(t, out, "held-out rows: the budget REFUSES 1 of 1; believe the refusal:")
	assert.Contains(t, out, "../testdata/logs/seed003-holdout.log:16\t-\t-\t-\trefuse: queue wait\trefuse: queue wait\t18.000\t9.000\t2400\t7.200\t2100\t1\n")
	assert.Contains(t, out, "check: FAIL (1 threshold passed; 1 held-out attempt refused)")
}

func TestCheckNoDataFails(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	require.NoError(t, os.WriteFile(pol, []byte("thresholds:\n  ttfb_s: [\"p(95) < 1s\"]\n  refused_rate: [\"rate == 0\"]\n"), 0o644))
	// seed003.log carries no ttfb_s: a percentile of nothing cannot pass.
	code, out, _ := reportRun(t, false, "", "check", "--policy", pol, seed003Log)
	assert.Equal(t, ExitRefuse, code)
	assert.Contains(t, out, "fail\tttfb_s\tp(95) < 1s\tp(95)=- (no data: nothing to measure, so it cannot pass)")
}

func TestCheckOptions(t *testing.T) {
	var got *CheckOptions
	ios, _, _, _ := TestStreams()
	f := &Factory{IO: ios, Getenv: func(string) string { return "" }}
	cmd := newCheckCmd(f, func(o *CheckOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--policy", policies + "pass.yaml", "--json", "a.log", "b.log"})
	require.NoError(t, cmd.Execute())
	assert.Equal(t, policies+"pass.yaml", got.Policy)
	assert.Equal(t, []string{"a.log", "b.log"}, got.Files)
	assert.True(t, got.JSON)
	assert.Equal(t, admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 2, MaxWait: 8 * time.Second}, got.Budget)
	require.Len(t, got.Thresholds, 12)
	assert.Equal(t, "p(50) < 2s", got.Thresholds[0].String())
	assert.Equal(t, policies+"pass.yaml:5: thresholds.wait_s", got.Thresholds[0].Where)
	assert.Equal(t, "billable_failure_rate", got.Thresholds[11].Metric, "file order")
}

func TestCheckScripts(t *testing.T) { runReportScripts(t, "check_*.txtar") }

func TestCheckFormatObserved(t *testing.T) {
	th := func(m, e string) admit.Threshold {
		x, err := admit.ParseThreshold(m, e)
		require.NoError(t, err)
		return x
	}
	assert.Equal(t, "12.000s", formatObserved(th("wait_s", "p(95) < 5"), 12))
	assert.Equal(t, "0.0004s", formatObserved(th("wait_s", "max > 0"), 0.0004), "to the microsecond the log kept")
	assert.Equal(t, "0.233333s", formatObserved(th("wait_s", "avg > 0"), 0.7/3), "a mean finer than that: 6 decimals")
	assert.Equal(t, "62.5%", formatObserved(th("refused_rate", "rate < 30%"), 0.625))
	assert.Equal(t, "0.6250", formatObserved(th("refused_rate", "rate < 0.3"), 0.625))
	assert.Equal(t, "3", formatObserved(th("unknown_rate", "count < 1"), 3))
	assert.Equal(t, "2.333", formatObserved(th("attempts_per_success", "< 1.5"), 7.0/3))
	assert.Equal(t, "∞", formatObserved(th("attempts_per_success", "< 1.5"), math.Inf(1)))
	assert.True(t, strings.HasPrefix(formatObserved(th("tokens", "avg < 5"), 871.25), "871.250"))
}

// A run's own end-of-run figures and the summary of its log come from
// the same code: the deadline-miss, unknown and refused rates and
// attempts per success agree on the bad-provider-day script. (check
// judges the log under its replayed decisions; where the replay agrees
// with the run, as it must, check's figures are these.)
func TestLogFiguresEqualTheRunsOwn(t *testing.T) {
	const policy = "../testdata/policies/bad-day-gate.yaml"
	logPath := filepath.Join(t.TempDir(), "rehearsal.log")
	code, out, errOut := costRun(t, "rehearse", "--config", policy, "--jobs", "40", "--seed", "7", "--log", logPath, "--json")
	require.Equal(t, ExitOK, code, errOut)
	var run rehearseJSON
	require.NoError(t, json.Unmarshal([]byte(out), &run))
	require.Positive(t, run.Jobs.DeadlineMisses, "the bad day misses deadlines")

	rows, _, err := ledgerfile.ReadFile(logPath)
	require.NoError(t, err)
	sum := summary.New(summary.Options{By: summary.BySeat, SlowAfter: 10 * time.Second, Deadline: 45 * time.Second})
	for i := range rows {
		sum.Add(&rows[i], logPath)
	}
	s := sum.Close()
	got := map[string]float64{}
	for _, m := range []string{"deadline_miss_rate", "unknown_rate", "refused_rate", "attempts_per_success"} {
		th, err := admit.ParseThreshold(m, "value >= 0")
		if err != nil {
			th, err = admit.ParseThreshold(m, "rate >= 0")
		}
		require.NoError(t, err)
		o, _ := s.Observed(m)
		got[m], _ = th.Eval(o)
	}
	assert.InDelta(t, float64(run.Jobs.DeadlineMissRate), got["deadline_miss_rate"], 1e-12)
	assert.InDelta(t, float64(run.Jobs.UnknownRate), got["unknown_rate"], 1e-12)
	assert.InDelta(t, float64(run.Jobs.RefusedRate), got["refused_rate"], 1e-12)
	assert.InDelta(t, float64(run.Jobs.AttemptsPerSuccess), got["attempts_per_success"], 1e-12)
}

// Two jobs that succeeded, written by record (which writes no job_end),
// are two good jobs: goodput's jobs and end states are the summary's.
func TestCheckGoodputOfRecordedJobs(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "rehearsal.log")
	for _, job := range []string{"a", "b"} {
		code, _, errOut := costRun(t, "record", "--log", log, "--job", job, "--seat", "s", "--wait", "0.7", "--elapsed", "2", "--tokens", "100")
		require.Equal(t, ExitOK, code, errOut)
	}
	policy := filepath.Join(dir, "p.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("budget: {deadline: 45s, token_ceiling: 8000, max_attempts: 2, max_wait: 5s}\n"+
		"thresholds:\n  goodput: [\"value > 0\"]\n  wait_s: [\"p(50) <= 0.7s\", \"p(50) <= 0.7\", \"max == 0.7s\", \"p(50) <= 700ms\"]\n"), 0o644))
	code, out, errOut := costRun(t, "check", "--json", "--policy", policy, log)
	require.Equal(t, ExitOK, code, "%s\n%s", out, errOut)
	var got checkJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, int64(2), got.Jobs)
	assert.Equal(t, int64(2), got.Goodput.Jobs)
	assert.Equal(t, int64(2), got.Goodput.Good)
	for _, th := range got.Thresholds {
		assert.True(t, th.Pass, "%s %s", th.Metric, th.Threshold)
		if th.Metric == "wait_s" {
			require.NotNil(t, th.Observed)
			assert.Equal(t, 0.7, *th.Observed, "the log's 0.700, not one ulp above")
			assert.Equal(t, 0.7, th.Limit, th.Threshold)
		}
	}
	_, text, _ := costRun(t, "check", "--policy", policy, log)
	assert.NotContains(t, text, "fail")
}
