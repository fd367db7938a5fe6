package cmd

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// reportRun runs one command line against test streams, piped unless tty.
func reportRun(t *testing.T, tty bool, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ios, in, out, errOut := TestStreams()
	in.WriteString(stdin)
	ios.OutTTY = tty
	f := &Factory{IO: ios, Now: func() time.Time { t.Fatal("report must not read the clock"); return time.Time{} },
		Getenv: func(string) string { return "" }, Ctx: context.Background()}
	code = Run(f, args)
	return code, out.String(), errOut.String()
}

// golden compares got with testdata/golden/<name>; RETRYGATE_UPDATE_GOLDEN=1 rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("..", "testdata", "golden", name)
	if os.Getenv("RETRYGATE_UPDATE_GOLDEN") != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run with RETRYGATE_UPDATE_GOLDEN=1")
	assert.Equal(t, string(want), got, "golden %s differs; run with RETRYGATE_UPDATE_GOLDEN=1 to accept", name)
}

const (
	mixedLog    = "../testdata/logs/mixed.log"
	seed003Log  = "../testdata/logs/seed003.log"
	damagedLog  = "../testdata/logs/damaged.log"
	seedHoldLog = "../testdata/logs/seed003-holdout.log"
)

func TestReportGolden(t *testing.T) {
	tests := []struct {
		name string
		tty  bool
		args []string
	}{
		{"report/mixed.tsv", false, []string{"report", mixedLog}},
		{"report/mixed.table", true, []string{"report", mixedLog}},
		{"report/mixed.json", false, []string{"report", "--json", mixedLog}},
		{"report/mixed.csv", false, []string{"report", "--csv", mixedLog}},
		{"report/mixed-by-outcome.tsv", false, []string{"report", "--by", "outcome", mixedLog}},
		{"report/mixed-hist-wait.txt", false, []string{"report", "--hist", "wait", mixedLog}},
		{"report/seed003.table", true, []string{"report", seed003Log}},
		{"report/seed003.json", false, []string{"report", "--json", seed003Log}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, _ := reportRun(t, tt.tty, "", tt.args...)
			require.Equal(t, ExitOK, code)
			golden(t, tt.name, out)
		})
	}
}

// The piped form is for scripts: a header, one line per group, the same
// number of fields on every line, and the column order fixed.
func TestReportTSVShape(t *testing.T) {
	code, out, _ := reportRun(t, false, "", "report", mixedLog)
	require.Equal(t, ExitOK, code)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 4) // header, cheap, scratch, (all)
	header := strings.Split(lines[0], "\t")
	assert.Equal(t, wideHeader(), header)
	for _, l := range lines[1:] {
		assert.Len(t, strings.Split(l, "\t"), len(header), l)
	}
	col := func(line, name string) string {
		for i, h := range header {
			if h == name {
				return strings.Split(line, "\t")[i]
			}
		}
		t.Fatalf("no column %s", name)
		return ""
	}
	assert.Equal(t, "scratch", col(lines[2], "group"))
	assert.Equal(t, "12.000", col(lines[2], "wait_s_p95"))
	assert.Equal(t, "2550", col(lines[3], "retry_tax_tokens"))
	assert.Equal(t, "0.7500", col(lines[3], "billable_failure_rate"))
	assert.Equal(t, "", col(lines[1], "billable_failure_rate"), "undefined is empty, not 0")

	code, out, _ = reportRun(t, false, "", "report", "--csv", mixedLog)
	require.Equal(t, ExitOK, code)
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	require.NoError(t, err)
	assert.Equal(t, wideHeader(), recs[0])
	assert.Len(t, recs, 4)
}

func TestReportJSONFigures(t *testing.T) {
	code, out, _ := reportRun(t, false, "", "report", "--json", "--max-tokens", "1000", mixedLog)
	require.Equal(t, ExitOK, code)
	var got struct {
		Rows int64 `json:"rows"`
		All  struct {
			Attempts           int64                 `json:"attempts"`
			AttemptsPerSuccess float64               `json:"attempts_per_success"`
			Wait               struct{ P95 float64 } `json:"wait_s"`
			RetryTax           struct {
				Tokens int64   `json:"tokens"`
				USD    float64 `json:"usd"`
			} `json:"retry_tax"`
		} `json:"all"`
		Recommendations []struct {
			Key     string   `json:"key"`
			Seconds *float64 `json:"seconds"`
			Rows    int64    `json:"rows"`
			Warning string   `json:"warning"`
		} `json:"recommendations"`
		Warnings []string `json:"warnings"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, int64(9), got.Rows)
	assert.Equal(t, int64(8), got.All.Attempts)
	assert.Equal(t, 2.0, got.All.AttemptsPerSuccess)
	assert.Equal(t, 12.0, got.All.Wait.P95)
	assert.Equal(t, int64(2550), got.All.RetryTax.Tokens)
	assert.InDelta(t, 0.0051, got.All.RetryTax.USD, 1e-12)
	require.Len(t, got.Recommendations, 3)
	// ttft = p95 wait of ok rows (6.0); rate = (200+300+400+500) tokens over
	// (3+2.5+3.5+3) s of generation = 1400/12; 6 + 1000·12/1400.
	require.NotNil(t, got.Recommendations[2].Seconds)
	assert.InDelta(t, 6+1000*12.0/1400, *got.Recommendations[2].Seconds, 1e-9)
	assert.Contains(t, got.Warnings[0], "timeouts.soft: rests on only 4 rows")
}

func TestReportMalformedRow(t *testing.T) {
	code, out, errOut := reportRun(t, false, "", "report", damagedLog)
	assert.Equal(t, ExitBad, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, `retrygate: failed to read log "../testdata/logs/damaged.log": line 8: wait_s: not a number "1,2"`)
	assert.Contains(t, errOut, "retrygate: hint: fix the row, or pass --skip-bad")

	code, out, errOut = reportRun(t, false, "", "report", "--skip-bad", damagedLog)
	assert.Equal(t, ExitOK, code)
	assert.Contains(t, errOut, "retrygate: warning: ../testdata/logs/damaged.log: line 10: torn write (no newline at end of line); skipped")
	assert.Contains(t, errOut, "retrygate: warning: --skip-bad skipped 1 malformed row:\nretrygate: warning:   ../testdata/logs/damaged.log:8: wait_s: not a number \"1,2\"")
	assert.Contains(t, out, "\nscratch\t2\t2\t")

	code, out, _ = reportRun(t, false, "", "report", "--skip-bad", "--json", damagedLog)
	assert.Equal(t, ExitOK, code)
	assert.Contains(t, out, `"torn": [
    "../testdata/logs/damaged.log:10"
  ]`)
	assert.Contains(t, out, `"skipped": [
    "../testdata/logs/damaged.log:8"
  ]`)
}

func TestReportStdinAndSince(t *testing.T) {
	data, err := os.ReadFile(mixedLog)
	require.NoError(t, err)
	// The newest row is 10:05:00; 2m back keeps rows from 10:03:00 on.
	code, out, _ := reportRun(t, false, string(data), "report", "--since", "2m", "--json", "-")
	require.Equal(t, ExitOK, code)
	var got struct {
		Files  []string `json:"files"`
		Since  string   `json:"since"`
		Rows   int64    `json:"rows"`
		Before int64    `json:"rows_before_since"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, []string{"stdin"}, got.Files)
	assert.Equal(t, "2025-06-02T10:03:00Z", got.Since)
	assert.Equal(t, int64(4), got.Rows)
	assert.Equal(t, int64(5), got.Before)

	code, out, _ = reportRun(t, false, "", "report", "--since", "2025-06-02T10:04:00Z", "--json", mixedLog)
	require.Equal(t, ExitOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, int64(2), got.Rows)
}

func TestReportOptions(t *testing.T) {
	var got *ReportOptions
	ios, _, _, _ := TestStreams()
	f := &Factory{IO: ios, Getenv: func(string) string { return "" }}
	cmd := newReportCmd(f, func(o *ReportOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--by", "model", "--since", "90m", "--max-tokens", "512", "--skip-bad", "a.log", "-"})
	require.NoError(t, cmd.Execute())
	assert.Equal(t, []string{"a.log", "-"}, got.Files)
	assert.Equal(t, summary.ByModel, got.By)
	assert.Equal(t, 90*time.Minute, got.SinceBack)
	assert.True(t, got.Since.IsZero())
	assert.Equal(t, int64(512), got.MaxTokens)
	assert.True(t, got.SkipBad)
	assert.Equal(t, 10*time.Second, got.SlowAfter)

	cmd = newReportCmd(f, func(o *ReportOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--hist", "wait"})
	require.NoError(t, cmd.Execute())
	assert.Equal(t, []string{"rehearsal.log"}, got.Files, "the config's log by default")
	assert.Equal(t, 5.0, got.HistCap)
	assert.Equal(t, "budget.max_wait (default)", got.HistCapLabel)
}

func TestReportBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"report", "--by", "seats", mixedLog}, `--by: unknown grouping "seats" (want seat, model, job or outcome)`},
		{[]string{"report", "--since", "yesterday", mixedLog}, `--since: "yesterday" is neither an RFC 3339 time`},
		{[]string{"report", "--hist", "ttfb", mixedLog}, `--hist: unknown metric "ttfb" (want wait, elapsed, tokens or cdf)`},
		{[]string{"report", "--json", "--csv", mixedLog}, "--json and --csv: choose one"},
		{[]string{"report", "--hist", "wait", "--json", mixedLog}, "--hist draws for a terminal"},
		{[]string{"report", "--max-tokens", "-1", mixedLog}, "--max-tokens: must not be negative"},
		{[]string{"report", "no-such.log"}, `failed to open log "no-such.log": no such file or directory`},
		{[]string{"report", "../testdata"}, `failed to read log "../testdata": is a directory`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := reportRun(t, false, "", tt.args...)
			assert.Equal(t, ExitBad, code)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tt.want)
		})
	}
}

func TestReportHistBins(t *testing.T) {
	for _, c := range []struct {
		max, cap float64
		whole    bool
		bins     int
		step     float64
	}{
		{12, 5, false, 12, 1}, // the cap on an edge
		{25, 45, false, 9, 5}, // every value under the cap
		{1300, 8000, true, 16, 500},
		{0.3, 5, false, 10, 0.5},
	} {
		bins, step := histBins(c.max, c.cap, c.whole)
		assert.Equal(t, c.bins, bins, "%+v", c)
		assert.InDelta(t, c.step, step, 1e-12, "%+v", c)
	}
}

// runReportScripts runs this command family's end-to-end scripts on their
// own (TestScript runs them with every other script).
func runReportScripts(t *testing.T, pattern string) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "script", pattern))
	require.NoError(t, err)
	require.NotEmpty(t, files, pattern)
	testscript.Run(t, testscript.Params{
		Files:         files,
		UpdateScripts: os.Getenv("RETRYGATE_UPDATE_GOLDEN") != "",
		Setup: func(env *testscript.Env) error {
			env.Setenv("REPO", repoRoot(t))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){"exits": cmdExits},
	})
}

func TestReportScripts(t *testing.T) { runReportScripts(t, "report_*.txtar") }

// Two identical rehearsals in two logs are twice the jobs, at the same
// attempts per success: rehearse's r<N>-<k> ids are unique within one
// log only, and the same id in two logs is two jobs.
func TestReportTwoLogsOfOneRehearsal(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := rehearseRun(t, dir, nil, "--config", repoPath(t, "testdata/policies/bad-day-gate.yaml"), "--jobs", "40", "--seed", "3", "--log", "a.log")
	require.Equal(t, ExitOK, code, errOut)
	b, err := os.ReadFile(filepath.Join(dir, "a.log"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.log"), b, 0o644))
	read := func(logs ...string) reportJSON {
		code, out, errOut := reportRun(t, false, "", append([]string{"report", "--json"}, logs...)...)
		require.Equal(t, 0, code, errOut)
		var r reportJSON
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		return r
	}
	one, two := read(filepath.Join(dir, "a.log")), read(filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log"))
	assert.Equal(t, int64(40), one.All.Jobs)
	assert.Equal(t, int64(80), two.All.Jobs)
	assert.Equal(t, 2*one.All.Succeeded, two.All.Succeeded)
	assert.Equal(t, one.All.AttemptsPerSuccess, two.All.AttemptsPerSuccess)
	// The same file named twice is two logs too.
	assert.Equal(t, int64(80), read(filepath.Join(dir, "a.log"), filepath.Join(dir, "a.log")).All.Jobs)
}
