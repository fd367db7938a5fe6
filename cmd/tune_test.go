package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTuneGolden(t *testing.T) {
	tests := []struct {
		name string
		code int
		args []string
	}{
		{"tune/mixed.yaml", ExitRefuse, []string{"tune", mixedLog}},
		{"tune/mixed.json", ExitRefuse, []string{"tune", "--json", mixedLog}},
		{"tune/seed003-holdout.yaml", ExitRefuse, []string{"tune", seedHoldLog}},
		{"tune/seed003.yaml", ExitOK, []string{"tune", seed003Log}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, _ := reportRun(t, false, "", tt.args...)
			require.Equal(t, tt.code, code)
			golden(t, tt.name, out)
		})
	}
}

// The snippet is a policy: check reads it back (with thresholds added:
// a check without any is bad input), and refuses the held-out row tune
// refused, for the same reason.
func TestTuneSnippetIsAPolicy(t *testing.T) {
	code, out, _ := reportRun(t, false, "", "tune", mixedLog)
	require.Equal(t, ExitRefuse, code, "the held-out f1 waited 6s for its answer: past a 1.9s cap")
	pol := filepath.Join(t.TempDir(), "tuned.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(out+"thresholds:\n  unknown_rate: [\"rate < 50%\"]\n"), 0o644))
	code, out, errOut := reportRun(t, false, "", "check", "--policy", pol, mixedLog)
	require.Equal(t, ExitRefuse, code, errOut)
	assert.Contains(t, out, "deadline 35.7s, token_ceiling 2500, max_attempts 2, max_wait 1.9s, max_spend_usd 0.003")
	assert.Contains(t, out, "held-out rows: the budget REFUSES 1 of 1")

	// Without thresholds, the snippet alone is no gate: exit 2, naming the file.
	bare := filepath.Join(t.TempDir(), "bare.yaml")
	_, tuned, _ := reportRun(t, false, "", "tune", mixedLog)
	require.NoError(t, os.WriteFile(bare, []byte(tuned), 0o644))
	code, _, errOut = reportRun(t, false, "", "check", "--policy", bare, mixedLog)
	assert.Equal(t, ExitBad, code)
	assert.Contains(t, errOut, "bare.yaml: no thresholds")
}

// An error's wait is how long the error took: tune's wait cap rests on
// the attempts that produced content, and shows the others beside it.
func TestTuneWaitCapFromContent(t *testing.T) {
	_, out, _ := reportRun(t, false, "", "tune", mixedLog)
	assert.Contains(t, out, "max_wait: 1.9s")
	assert.NotContains(t, out, "max_wait: 15", "d1's slow 500 (12s) is not a wait")
	assert.Regexp(t, `(?m)^#   server_error +1 attempt, p95 wait_s 12\.000s$`, out)
}

func TestTuneSaysWhatItRestsOn(t *testing.T) {
	code, out, errOut := reportRun(t, false, "", "tune", seed003Log)
	require.Equal(t, ExitOK, code)
	assert.Contains(t, out, "# UNVERIFIED: no held-out rows.")
	assert.Contains(t, errOut, "retrygate: warning: UNVERIFIED: no held-out rows (holdout=true).")
	assert.Contains(t, errOut, "4 of 4 suggestions rest on fewer than 30 values")

	code, out, errOut = reportRun(t, false, "", "tune", seedHoldLog)
	require.Equal(t, ExitRefuse, code)
	assert.Contains(t, out, "# Held-out check: the suggested budget REFUSES 1 of 1 held-out row. The held-out rows DO NOT agree.")
	assert.Contains(t, out, "../testdata/logs/seed003-holdout.log:16 job=- attempt=-  refuse: attempt cap (also: queue wait, deadline, token ceiling)")
	assert.Contains(t, errOut, "the held-out rows disagree")

	code, out, _ = reportRun(t, false, "", "tune", "--json", seedHoldLog)
	require.Equal(t, ExitRefuse, code)
	var got tuneJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.True(t, got.HeldOut.Verified)
	assert.False(t, got.HeldOut.Agree)
	require.Len(t, got.HeldOut.Refused, 1)
	assert.Equal(t, 16, got.HeldOut.Refused[0].Line)
}

func TestTuneBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tune", "--margin", "0.9", mixedLog}, "--margin: must be between 1 and 100, got 0.9"},
		{[]string{"tune", damagedLog}, "line 8: wait_s: not a number"},
	} {
		code, _, errOut := reportRun(t, false, "", c.args...)
		assert.Equal(t, ExitBad, code)
		assert.Contains(t, errOut, c.want)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "r.log")
	require.NoError(t, os.WriteFile(log, []byte("job=a wait_s=1 elapsed_s=25 tokens=10 outcome=timeout\n"), 0o644))
	code, _, errOut := reportRun(t, false, "", "tune", log)
	assert.Equal(t, ExitBad, code)
	assert.Contains(t, errOut, "no job succeeded outside the held-out rows")
}

func TestTuneMargin(t *testing.T) {
	code, out, _ := reportRun(t, false, "", "tune", "--margin", "2", "--json", mixedLog)
	require.Equal(t, ExitRefuse, code)
	var got tuneJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, 3.0, got.Budget.MaxWaitS) // p95 content wait 1.5 × 2
	assert.Equal(t, 57.0, got.Budget.DeadlineS)
	assert.Equal(t, int64(4000), got.Budget.TokenCeiling)
}

func TestTuneScripts(t *testing.T) { runReportScripts(t, "tune_*.txtar") }

// tune --help says what the deadline's time-to-success charges: each
// attempt's delay + elapsed up to the kept one, as the code counts it.
func TestTuneHelpSaysDelayPlusElapsed(t *testing.T) {
	code, out, _ := reportRun(t, false, "", "tune", "--help")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "each attempt's delay +\n                 elapsed up to and including the kept one")
	assert.NotContains(t, out, "wait + elapsed")
}
