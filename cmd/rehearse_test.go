package cmd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// rehearseNow is the fixed Now of these tests: a virtual run's rows are
// then exact, timestamps included.
var rehearseNow = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

// rehearseRun runs one command line in dir with test streams.
func rehearseRun(t *testing.T, dir string, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Chdir(dir)
	ios, _, out, errOut := TestStreams()
	if ctx == nil {
		ctx = context.Background()
	}
	f := &Factory{IO: ios, Now: func() time.Time { return rehearseNow }, Getenv: func(string) string { return "" }, Ctx: ctx}
	code = Run(f, append([]string{"rehearse"}, args...))
	return code, out.String(), errOut.String()
}

// rehearseRepo is the repository root, read before any test changes directory.
var rehearseRepo = func() string {
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..")
}()

func repoPath(t *testing.T, rel string) string {
	t.Helper()
	return filepath.Join(rehearseRepo, rel)
}

// badDayConfig is bad-day.yaml's policy with the chain [bad-day, fallback-ok].
func badDayConfig(t *testing.T, extra string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := `budget: {deadline: 45s, token_ceiling: 8000, max_attempts: 3, max_wait: 15s}
retry: {base_delay: 500ms, max_delay: 8s, slow_5xx_after: 10s, honor_retry_after: true, timeouts_retried: 1}
timeouts: {soft: 6s, hard: 20s}
breaker: {failure_rate: 0}
seats:
  bad-day: {kind: script, script: ` + repoPath(t, "testdata/seats/bad-day.yaml") + `}
  fallback-ok: {kind: script, script: ` + repoPath(t, "testdata/seats/fallback-ok.yaml") + `}
fallback: [bad-day, fallback-ok]
` + extra
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(cfg), 0o644))
	return dir
}

func TestRehearseFlagsToOptions(t *testing.T) {
	var got *RehearseOptions
	ios, _, _, _ := TestStreams()
	f := &Factory{IO: ios, Now: time.Now, Getenv: func(string) string { return "" }, Ctx: context.Background()}
	t.Chdir(t.TempDir())
	c := newRehearseCmd(f, func(o *RehearseOptions) error { got = o; return nil })
	c.SetArgs([]string{"--jobs", "3", "--concurrency", "2", "--seed", "9", "--prompt", "hi", "--max-tokens", "50", "--holdout", "--log", "x.log", "--max-wait", "7s"})
	require.NoError(t, c.Execute())
	assert.True(t, got.Demo, "no config at all: the built-in demo")
	require.Len(t, got.Chain, 1)
	assert.Equal(t, "scratch", got.Chain[0].Name)
	assert.Equal(t, "builtin:free-seat", got.Chain[0].Script)
	assert.Equal(t, 3, got.Jobs)
	assert.Equal(t, 2, got.Concurrency)
	assert.Equal(t, uint64(9), got.Seed)
	assert.True(t, got.SeedSet)
	assert.Equal(t, "hi", got.Prompt)
	assert.Equal(t, 50, got.MaxTokens)
	assert.True(t, got.Holdout)
	assert.Equal(t, "x.log", got.LogPath)
	assert.Equal(t, 7*time.Second, got.Policy.Budget.MaxWait, "budget flags win over defaults")
	assert.Equal(t, 45*time.Second, got.Policy.Budget.Deadline)

	// With a config: the fallback chain in order, or --seat alone.
	t.Chdir(badDayConfig(t, ""))
	c = newRehearseCmd(f, func(o *RehearseOptions) error { got = o; return nil })
	c.SetArgs([]string{})
	require.NoError(t, c.Execute())
	assert.False(t, got.Demo)
	require.Len(t, got.Chain, 2)
	assert.Equal(t, "bad-day", got.Chain[0].Name)
	assert.Equal(t, "fallback-ok", got.Chain[1].Name)
	assert.Equal(t, "rehearsal.log", got.LogPath)
	assert.Equal(t, defaultPrompt, got.Prompt)
	assert.False(t, got.SeedSet)
	c = newRehearseCmd(f, func(o *RehearseOptions) error { got = o; return nil })
	c.SetArgs([]string{"--seat", "fallback-ok"})
	require.NoError(t, c.Execute())
	require.Len(t, got.Chain, 1)
	assert.Equal(t, "fallback-ok", got.Chain[0].Name)
}

func TestRehearseDemo(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := rehearseRun(t, dir, nil)
	require.Equal(t, ExitOK, code, errOut)
	assert.Equal(t, `seat	job	attempt	wait_s	elapsed_s	tokens	outcome	decision	job_end
scratch	r1-1	1	1.200	7.200	2100	reset	admit	-
scratch	r1-1	2	5.000	5.000	1500	wait_cap	refuse: queue wait	-
scratch	r1-1	3	5.000	11.000	2100	not sent	refuse: attempt cap	unknown

seat	attempts	successes	wait_p50_s	wait_p95_s	elapsed_p50_s	elapsed_p95_s	tokens	refusals
scratch	2	0	1.200	5.000	5.000	7.200	3600	attempt cap 1

jobs	succeeded	failed	unknown	cancelled	deadline_misses
1	0	0	1	0	0
`, out)
	assert.Contains(t, errOut, "retrygate: built-in demo: the free-seat demo")
	assert.Contains(t, errOut, "your own seat goes in retrygate.yaml")
	assert.Contains(t, errOut, "run r1, seed 1, virtual clock, appending to rehearsal.log")

	data, err := os.ReadFile(filepath.Join(dir, "rehearsal.log"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 6)
	assert.Equal(t, ledgerfile.Header, lines[0])
	assert.Equal(t, "# run r1 seed=1 jobs=1 concurrency=1 seats=scratch clock=virtual", lines[1])
	// The policy in force, so a reviewer can check each refusal from the log alone.
	assert.True(t, strings.HasPrefix(lines[2], "# policy run=r1 budget.deadline=45s budget.token_ceiling=8000 budget.max_attempts=2 budget.max_wait=5s "), lines[2])
	assert.Regexp(t, ` fallback=scratch seats.scratch.kind=script seats.scratch.model=scratch hash=[0-9a-f]{12}$`, lines[2])
	assert.True(t, strings.HasPrefix(lines[3], "ts=2026-03-14T09:00:00Z job=r1-1 attempt=1 seat=scratch model=scratch wait_s=1.200"), lines[3])
	assert.NotContains(t, string(data), defaultPrompt, "the prompt is never written")
	assert.Contains(t, lines[3], "prompt_sha=")

	// A second run into the same log takes the next run number.
	code, _, errOut = rehearseRun(t, dir, nil)
	require.Equal(t, ExitOK, code, errOut)
	rows, _, err := ledgerfile.ReadFile(filepath.Join(dir, "rehearsal.log"))
	require.NoError(t, err, "two runs into one log never collide on (job, attempt)")
	require.Len(t, rows, 6)
	assert.Equal(t, "r2-1", rows[5].Job)
}

func TestRehearseSeedsRepeat(t *testing.T) {
	run := func(seed string) string {
		dir := badDayConfig(t, "")
		code, _, errOut := rehearseRun(t, dir, nil, "--jobs", "7", "--seed", seed)
		require.Equal(t, ExitOK, code, errOut)
		data, err := os.ReadFile(filepath.Join(dir, "rehearsal.log"))
		require.NoError(t, err)
		return string(data)
	}
	a, b, c := run("4"), run("4"), run("5")
	assert.Equal(t, a, b, "same seed, fresh logs: identical rows")
	assert.NotEqual(t, a, c, "different seeds: different jitter")
	assert.Contains(t, a, `decision="refuse: permanent error"`)
	assert.Contains(t, a, "delay_s=2.000", "Retry-After 2s honoured")
	assert.Contains(t, a, "delay_s=60.000")
	assert.Contains(t, a, `decision="refuse: deadline" sent=false job_end=failed`)
}

func TestRehearseJSON(t *testing.T) {
	code, out, errOut := rehearseRun(t, t.TempDir(), nil, "--json", "--seed", "2")
	require.Equal(t, ExitOK, code, errOut)
	var got rehearseJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, "r1", got.Run)
	assert.Equal(t, uint64(2), got.Seed)
	assert.Equal(t, "virtual", got.Clock)
	assert.True(t, got.Demo)
	// The figures check computes over the log: 1 of 3 rows refused (the
	// one the cap refused before sending; the wait-capped attempt was
	// sent, and counts under its outcome), the one job unknown, no answer.
	assert.Equal(t, jobsJSON{Total: 1, Unknown: 1, UnknownRate: 1, RefusedRate: summary.Figure(1.0 / 3),
		AttemptsPerSuccess: 0}, got.Jobs)
	require.Len(t, got.Seats, 1)
	assert.Equal(t, int64(2), got.Seats[0].Attempts)
	assert.Equal(t, map[string]int64{"attempt cap": 1}, got.Seats[0].Refusals)
}

func TestRehearseInterruptedExitsOne(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code, _, errOut := rehearseRun(t, t.TempDir(), ctx, "--jobs", "5")
	assert.Equal(t, ExitRefuse, code)
	assert.Contains(t, errOut, "retrygate: interrupted: 0 of 5 jobs finished; every row so far is in rehearsal.log")
}

func TestRehearseBadInput(t *testing.T) {
	tests := []struct {
		name  string
		extra string // appended to the bad-day config; "-" for no config
		args  []string
		want  string
	}{
		{"negative jobs", "-", []string{"--jobs", "-1"}, "retrygate: --jobs: must be at least 1, got -1"},
		{"zero concurrency", "-", []string{"--concurrency", "0"}, "retrygate: --concurrency: must be at least 1, got 0"},
		{"jobs not a number", "-", []string{"--jobs", "many"}, `--jobs: not a whole number "many"`},
		{"both prompts", "-", []string{"--prompt", "a", "--prompt-file", "p.txt"}, "--prompt and --prompt-file: give one or the other"},
		{"missing prompt file", "-", []string{"--prompt-file", "nope.txt"}, `--prompt-file "nope.txt": no such file or directory`},
		{"empty prompt", "-", []string{"--prompt", " "}, "--prompt: empty prompt"},
		{"zero max tokens", "-", []string{"--max-tokens", "0"}, "--max-tokens: must be at least 1"},
		{"bad wait cap flag", "-", []string{"--max-wait", "0"}, "--max-wait: must be positive"},
		{"unknown seat", "", []string{"--seat", "nope"}, `retrygate: --seat: no seat named "nope" under seats`},
		{"fallback naming no seat", "x: 1\n", nil, "unknown key"},
		{"failure rate", "", []string{"--config", "rate.yaml"}, "breaker.failure_rate: must be between 0 and 1, got 1.5"},
		{"negative delay", "", []string{"--config", "neg.yaml"}, `retry.base_delay: negative duration "-1s"`},
		{"soft past hard", "", []string{"--config", "soft.yaml"}, "timeouts.soft: 30s is past timeouts.hard 20s"},
		{"fallback to nowhere", "", []string{"--config", "ghost.yaml"}, `fallback[1]: no seat named "ghost" under seats`},
		{"missing script", "", []string{"--config", "noscript.yaml"}, "seats.gone.script:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.extra != "-" {
				dir = badDayConfig(t, tt.extra)
			}
			files := map[string]string{
				"rate.yaml":     "breaker: {failure_rate: 1.5}\n",
				"neg.yaml":      "retry: {base_delay: -1s}\n",
				"soft.yaml":     "timeouts: {soft: 30s, hard: 20s}\n",
				"ghost.yaml":    "seats:\n  a: {kind: script, script: builtin:seed003}\nfallback: [a, ghost]\n",
				"noscript.yaml": "seats:\n  gone: {kind: script, script: /nonexistent/x.yaml}\nfallback: [gone]\n",
			}
			for name, body := range files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
			}
			code, out, errOut := rehearseRun(t, dir, nil, tt.args...)
			assert.Equal(t, ExitBad, code, errOut)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tt.want)
			assert.NoFileExists(t, filepath.Join(dir, "rehearsal.log"), "bad input never touches the log")
		})
	}
}
