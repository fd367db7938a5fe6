package cmd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// placeholders is the vocabulary.
var placeholders = []string{phDuration, phN, phUSD, phRate, phFile, phDir, phName, phID, phText, phTime, phAddr, phLayers, phSpec, phRates}

// Every flag's value is shown with one word of one vocabulary (or its
// fixed set of values): a new flag must be given one in flagWords.
func TestFlagPlaceholdersAreOneVocabulary(t *testing.T) {
	for _, fc := range flagCommands(t) {
		for _, fl := range fc.flags {
			if fl.Value.Type() == "bool" || fl.Name == "help" {
				continue
			}
			word := fl.Value.Type()
			ok := slices.Contains(placeholders, word) || (strings.HasPrefix(word, "{") && strings.HasSuffix(word, "}"))
			assert.True(t, ok, "%s --%s: placeholder %q is not in the vocabulary (add the flag to flagWords)", fc.path, fl.Name, word)
		}
	}
	code, out, _ := cfgRun(t, t.TempDir(), nil, "admit", "--help")
	require.Equal(t, ExitOK, code)
	for _, want := range []string{"--next-tokens n ", "--used n ", "--spent duration ", "--max-spend usd ", "--log file "} {
		assert.Contains(t, out, want)
	}
	_, out, _ = cfgRun(t, t.TempDir(), nil, "report", "--help")
	assert.Contains(t, out, "--by {seat|model|job|outcome}")
	_, out, _ = cfgRun(t, t.TempDir(), nil, "simulate", "--help")
	assert.Contains(t, out, "--jobs n ")
	assert.Contains(t, out, "--rate n ")
}

func TestTyposGetDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--polcy", "p.yaml"}, "retrygate: unknown flag: --polcy\nretrygate: hint: did you mean --policy?\n"},
		{[]string{"report", "--jsn"}, "retrygate: unknown flag: --jsn\nretrygate: hint: did you mean --json?\n"},
		{[]string{"rehersal"}, "retrygate: unknown command \"rehersal\"\nretrygate: hint: did you mean rehearse?\n"},
		{[]string{"seat", "serv"}, "retrygate: unknown command \"serv\" for 'retrygate seat'\nretrygate: hint: did you mean retrygate seat serve?\n"},
		{[]string{"rehearse", "--jobs", "abc"}, "retrygate: --jobs: not a whole number \"abc\"\n"},
		{[]string{"tune", "--margin", "wide"}, "retrygate: --margin: not a number \"wide\"\n"},
		{[]string{"report", "--colour"}, "retrygate: unknown flag: --colour\nretrygate: hint: see 'retrygate report --help'\n"},
	} {
		code, out, errOut := cfgRun(t, t.TempDir(), nil, tc.args...)
		assert.Equal(t, ExitBad, code, "%v", tc.args)
		assert.Empty(t, out)
		assert.Equal(t, tc.want, errOut, "%v", tc.args)
	}
}

func TestCompletionOffersFlagValues(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"),
		[]byte("seats:\n  fast: {kind: script, script: builtin:seed003}\n  Slow: {kind: script, script: builtin:seed003}\n"), 0o600))
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"report", "--by", ""}, []string{"seat", "model", "job", "outcome"}},
		{[]string{"report", "--hist", ""}, []string{"wait", "elapsed", "tokens", "cdf"}},
		{[]string{"seat", "serve", "--format", ""}, []string{"openai", "anthropic", "ollama"}},
		{[]string{"record", "--outcome", "ti"}, []string{"ok", "conn_error", "rate_limited", "client_error", "server_error", "timeout", "wait_cap", "reset", "cancelled", "incomplete"}},
		{[]string{"rehearse", "--seat", ""}, []string{"fast", "slow"}},
		{[]string{"time", "--seat", ""}, []string{"fast", "slow"}},
	} {
		code, out, errOut := cfgRun(t, dir, nil, append([]string{"__complete"}, tc.args...)...)
		require.Equal(t, ExitOK, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.NotEmpty(t, lines)
		assert.Equal(t, tc.want, lines[:len(lines)-1], "%v", tc.args)
		assert.Equal(t, ":4", lines[len(lines)-1], "no file names among the values")
	}
}
