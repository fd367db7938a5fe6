package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flags > environment > file > defaults, each layer named when its value is bad.
func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "p.yaml", "budget:\n  deadline: 0.4s\n")
	writeFile(t, dir, "bad.yaml", "budget:\n  deadline: soon\n")
	env := map[string]string{"RETRYGATE_BUDGET_DEADLINE": "45s"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"default admits", nil, nil, ExitOK, ""},
		{"file over default", nil, []string{"--config", "p.yaml"}, ExitRefuse, "refuse: deadline"},
		{"env over file", env, []string{"--config", "p.yaml"}, ExitOK, ""},
		{"flag over env", env, []string{"--config", "p.yaml", "--deadline", "0.4"}, ExitRefuse, "refuse: deadline"},
		{"a bad file value", nil, []string{"--config", "bad.yaml"}, ExitBad, `bad.yaml:2: budget.deadline: not a duration "soon"`},
		{"a bad env value", map[string]string{"RETRYGATE_BUDGET_DEADLINE": "later"}, []string{"--config", "bad.yaml"}, ExitBad,
			`RETRYGATE_BUDGET_DEADLINE: not a duration "later"`},
		{"a bad flag value", env, []string{"--config", "bad.yaml", "--deadline", "now"}, ExitBad, `--deadline: not a duration "now"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cfgRun(t, dir, tc.env, append(admitArgs[:len(admitArgs):len(admitArgs)], tc.args...)...)
			assert.Equal(t, tc.code, code, errOut)
			assert.Contains(t, out+errOut, tc.want)
		})
	}
}

// One policy written in YAML, JSON and TOML is one policy.
func TestConfigFormatsAgree(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "p.yaml", "budget: {deadline: 30s, max_attempts: 3}\nbreaker: {failure_rate: 25%}\n"+
		"seats:\n  A: {kind: script, script: builtin:seed003, price_in: 2.5, headers: {X-Team: blue}}\nthresholds:\n  wait_s: [\"p(95) < 5\"]\n")
	// JSON's own escapes ("\/") are JSON's to read, not YAML's.
	writeFile(t, dir, "p.json", `{"log": "logs\/p.log", "budget": {"deadline": "30s", "max_attempts": 3}, "breaker": {"failure_rate": "25%"},
"seats": {"A": {"kind": "script", "script": "builtin:seed003", "price_in": 2.5, "headers": {"X-Team": "blue"}}},
"thresholds": {"wait_s": ["p(95) < 5"]}}`)
	writeFile(t, dir, "p.toml", "[budget]\ndeadline = \"30s\"\nmax_attempts = 3\n[breaker]\nfailure_rate = \"25%\"\n"+
		"[seats.A]\nkind = \"script\"\nscript = \"builtin:seed003\"\nprice_in = 2.5\nheaders = {X-Team = \"blue\"}\n[thresholds]\nwait_s = [\"p(95) < 5\"]\n")
	var first string
	for _, f := range []string{"p.yaml", "p.json", "p.toml"} {
		code, _, errOut := cfgRun(t, dir, nil, "rehearse", "--config", f, "--jobs", "1", "--log", f+".log")
		assert.Contains(t, []int{ExitOK, ExitRefuse}, code, "%s: %s", f, errOut)
		data, err := os.ReadFile(filepath.Join(dir, f+".log"))
		require.NoError(t, err)
		var policy string
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "# policy ") {
				policy = line
			}
		}
		assert.Contains(t, policy, "budget.deadline=30s")
		assert.Contains(t, policy, "breaker.failure_rate=0.25")
		if first == "" {
			first = policy
			continue
		}
		assert.Equal(t, first, policy, f)
	}
}

// No format lets a literal key through, and none echoes it.
func TestConfigLiteralKeyInEveryFormat(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "k.json", "{\"seats\": {\"a\": {\"kind\": \"openai\",\n\"Api_Key\": \"sk-live-abcdef123456\"}}}\n")
	writeFile(t, dir, "k.toml", "[seats.a]\nkind = \"openai\"\ntoken = \"sk-live-abcdef123456\"\n")
	for file, want := range map[string]string{
		"k.json": "k.json:2: seats.a.api_key: a literal API key in a config file is refused",
		"k.toml": "k.toml:3: seats.a.token: a literal API key in a config file is refused",
	} {
		code, _, errOut := cfgRun(t, dir, nil, append([]string{"--config", file}, admitArgs...)...)
		assert.Equal(t, ExitBad, code, file)
		assert.Contains(t, errOut, want)
		assert.NotContains(t, errOut, "abcdef123456")
	}
}
