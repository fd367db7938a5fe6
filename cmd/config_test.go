package cmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cfgRun runs retrygate in process in dir with env as the whole environment.
func cfgRun(t *testing.T, dir string, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Chdir(dir)
	ios, _, out, errOut := TestStreams()
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
		t.Setenv(k, v) // viper reads the process's environment
	}
	f := &Factory{
		IO:      ios,
		Now:     func() time.Time { return time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC) },
		Getenv:  func(k string) string { return env[k] },
		Environ: func() []string { return environ },
		Ctx:     context.Background(),
	}
	code = Run(f, args)
	return code, out.String(), errOut.String()
}

// admitArgs is an admit that reads only the budget: 1 s of work.
var admitArgs = []string{"admit", "--spent", "0", "--used", "0", "--spent-tokens", "0",
	"--next-wait", "0.5", "--next-elapsed", "0.5", "--next-tokens", "10"}

func TestConfigKeyCollisions(t *testing.T) {
	for _, tc := range []struct {
		name, file, text, want string
	}{
		{"yaml case", "p.yaml", "budget:\n  deadline: 45s\n  Deadline: 1ms\n",
			"p.yaml:3: budget.Deadline: the same key as p.yaml:2: budget.deadline"},
		{"yaml twice", "p.yaml", "budget:\n  deadline: 45s\n  deadline: 1ms\n",
			"p.yaml:3: budget.deadline: the same key as p.yaml:2: budget.deadline"},
		{"yaml seats", "p.yaml", "seats:\n  a: {kind: script, script: builtin:seed003}\n  A: {kind: openai, base_url: http://127.0.0.1:1/v1, model: m}\nfallback: [a]\n",
			"p.yaml:3: seats.A: the same key as p.yaml:2: seats.a"},
		{"yaml sections", "p.yaml", "budget: {deadline: 45s}\nBUDGET: {max_wait: 1s}\n",
			"p.yaml:2: BUDGET: the same key as p.yaml:1: budget"},
		{"json twice", "p.json", "{\"budget\": {\"deadline\": \"45s\",\n  \"deadline\": \"1ms\"}}\n",
			"p.json:2: budget.deadline: the same key as p.json:1: budget.deadline"},
		{"json case", "p.json", "{\"budget\": {\n\"deadline\": \"45s\",\n\"DeadLine\": \"1ms\"}}\n",
			"p.json:3: budget.DeadLine: the same key as p.json:2: budget.deadline"},
		{"toml case", "p.toml", "[budget]\ndeadline = \"45s\"\nDeadline = \"1ms\"\n",
			"p.toml:3: budget.Deadline: the same key as p.toml:2: budget.deadline"},
		{"toml twice", "p.toml", "[budget]\ndeadline = \"45s\"\ndeadline = \"1ms\"\n",
			"p.toml:3: budget.deadline: the same key as p.toml:2: budget.deadline"},
		{"toml tables", "p.toml", "[seats.a]\nkind = \"script\"\n[seats.A]\nkind = \"openai\"\n",
			"p.toml:3: seats.A: the same key as p.toml:1: seats.a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.text), 0o600))
			code, out, errOut := cfgRun(t, dir, nil, append([]string{"--config", tc.file}, admitArgs...)...)
			assert.Equal(t, ExitBad, code)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tc.want)
		})
	}
}

func TestConfigUnknownKeySuggests(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"),
		[]byte("budget:\n  deadline: 45s\n  max_atempts: 3\nseats:\n  Fast: {kind: script, scrpt: x.yaml}\n"), 0o600))
	code, _, errOut := cfgRun(t, dir, nil, admitArgs...)
	assert.Equal(t, ExitBad, code)
	assert.Contains(t, errOut, "retrygate.yaml:3: budget.max_atempts: unknown key\nretrygate: hint: did you mean budget.max_attempts?")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"),
		[]byte("seats:\n  Fast: {kind: script, scrpt: x.yaml}\n"), 0o600))
	_, _, errOut = cfgRun(t, dir, nil, admitArgs...)
	assert.Contains(t, errOut, "retrygate.yaml:2: seats.fast.scrpt: unknown key\nretrygate: hint: did you mean seats.fast.script?")
}

func TestConfigMustBeASmallRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte("log: x\n"+strings.Repeat("# padding\n", maxConfigBytes/10+1)), 0o600))

	for _, tc := range []struct{ path, want string }{
		{"/dev/zero", `--config "/dev/zero": not a regular file (a device)`},
		{fifo, "not a regular file (a FIFO)"},
		{big, "larger than 4 MiB (the limit)"},
		{dir, fmt.Sprintf("--config %q: is a directory", dir)},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			done := make(chan struct{})
			var code int
			var errOut string
			go func() {
				defer close(done)
				code, _, errOut = cfgRun(t, dir, nil, append([]string{"--config", tc.path}, admitArgs...)...)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("still reading the config after 30 s")
			}
			assert.Equal(t, ExitBad, code)
			assert.Contains(t, errOut, tc.want)
		})
	}
	t.Run("default config is a FIFO", func(t *testing.T) {
		d := t.TempDir()
		require.NoError(t, syscall.Mkfifo(filepath.Join(d, "retrygate.yaml"), 0o600))
		code, _, errOut := cfgRun(t, d, nil, admitArgs...)
		assert.Equal(t, ExitBad, code)
		assert.Contains(t, errOut, `config "retrygate.yaml": not a regular file (a FIFO)`)
	})
}

func TestConfigUnknownEnvironment(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		env       map[string]string
		code      int
		want, not string
	}{
		{map[string]string{"RETRYGATE_BUDGET_DEADLNE": "1s"}, ExitBad,
			"environment variable RETRYGATE_BUDGET_DEADLNE: not a setting\nretrygate: hint: did you mean RETRYGATE_BUDGET_DEADLINE?", ""},
		{map[string]string{"RETRYGATE_DEADLINE": "1s"}, ExitBad,
			"RETRYGATE_DEADLINE: not a setting\nretrygate: hint: did you mean RETRYGATE_BUDGET_DEADLINE?", ""},
		{map[string]string{"RETRYGATE_CONFIG": "x.yaml"}, ExitBad, "hint: name the config file with --config FILE", ""},
		{map[string]string{"RETRYGATE_FORCE_TTY": "0", "RETRYGATE_TEST_PG": "x"}, ExitOK, "", "not a setting"},
		{map[string]string{"RETRYGATE_BUDGET_DEADLINE": "0.4s"}, ExitRefuse, "", "not a setting"},
	} {
		code, _, errOut := cfgRun(t, dir, tc.env, admitArgs...)
		assert.Equal(t, tc.code, code, "%v: %s", tc.env, errOut)
		if tc.want != "" {
			assert.Contains(t, errOut, tc.want)
		}
		if tc.not != "" {
			assert.NotContains(t, errOut, tc.not)
		}
	}
}

// BenchmarkConfigManySeats reads a config of 40,000 seats: once seconds
// per read (every lookup scanned every seat), now linear.
func BenchmarkConfigManySeats(b *testing.B) {
	dir := b.TempDir()
	var sb strings.Builder
	sb.WriteString("seats:\n")
	for i := range 40000 {
		fmt.Fprintf(&sb, "  s%d: {kind: script, script: builtin:seed003}\n", i)
	}
	sb.WriteString("fallback: [s0, s1]\n")
	path := filepath.Join(dir, "big.yaml")
	require.NoError(b, os.WriteFile(path, []byte(sb.String()), 0o600))
	ios, _, _, _ := TestStreams()
	f := &Factory{IO: ios, Getenv: func(string) string { return "" }}
	root := NewRootCmd(f)
	f.ConfigFile = path // after the flag's default is set
	sim, _, err := root.Find([]string{"simulate"})
	require.NoError(b, err)
	b.ResetTimer()
	for b.Loop() {
		cfg, err := loadConfig(f, sim, nil)
		require.NoError(b, err)
		_, seats, err := cfg.policy()
		require.NoError(b, err)
		require.Len(b, seats, 40000)
	}
}

func TestConfigSeatsAreCheckedBeforeAnyOutput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	seed, err := os.ReadFile(filepath.Join(flagRepo, "testdata", "seats", "seed003.yaml"))
	require.NoError(t, err)
	write("conf/seats/s.yaml", string(seed))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "conf", "fifo.yaml"), 0o600))

	const key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	for _, tc := range []struct {
		name, config, want, hint string
	}{
		{"a chain names a seat twice", "seats:\n  a: {kind: script, script: seats/s.yaml}\nfallback: [a, a, a]\n",
			`p.yaml:3: fallback[1]: seat "a" is already fallback[0]`, "a chain names each seat once"},
		{"a key in api_key_env", "seats:\n  a: {kind: openai, base_url: http://127.0.0.1:1/v1, model: m, api_key_env: " + key + "}\n",
			"p.yaml:2: seats.a.api_key_env: holds something that looks like a key, not a variable name", "name the variable"},
		{"an upper-case key in api_key_env", "seats:\n  a: {kind: openai, base_url: http://127.0.0.1:1/v1, model: m, api_key_env: AKIAIOSFODNN7EXAMPLE}\n",
			"seats.a.api_key_env: holds something that looks like a key", ""},
		{"a key with dashes in api_key_env", "seats:\n  a: {kind: openai, base_url: http://127.0.0.1:1/v1, model: m, api_key_env: sk-proj-abc123}\n",
			"seats.a.api_key_env: holds something that looks like a key", ""},
		{"a script that is not there", "seats:\n  a: {kind: script, script: seats/bad-day.yaml}\n",
			`p.yaml:2: seats.a.script: "seats/bad-day.yaml": no such file or directory`,
			`a script's path is relative to the config file: "seats/bad-day.yaml" is ` + filepath.Join("conf", "seats", "bad-day.yaml")},
		{"a script that is a FIFO", "seats:\n  a: {kind: script, script: fifo.yaml}\n",
			`p.yaml:2: seats.a.script: "fifo.yaml": not a regular file (a FIFO)`, ""},
		{"a fallback seat typo", "seats:\n  fast: {kind: script, script: seats/s.yaml}\nfallback: [fsat]\n",
			`p.yaml:3: fallback[0]: no seat named "fsat" under seats`, "did you mean fast?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write("conf/p.yaml", tc.config)
			code, out, errOut := cfgRun(t, dir, nil, "rehearse", "--config", "conf/p.yaml", "--jobs", "1", "--log", "out.log")
			assert.Equal(t, ExitBad, code)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tc.want)
			assert.Contains(t, errOut, tc.hint)
			assert.NotContains(t, errOut, key)
			assert.NotContains(t, errOut, "AKIAIOSFODNN7EXAMPLE")
			assert.NotContains(t, errOut, "abc123")
			assert.NoFileExists(t, filepath.Join(dir, "out.log"), "no output before the whole config is checked")
		})
	}

	t.Run("a lone seat is its own chain; its script is found beside the config", func(t *testing.T) {
		write("conf/p.yaml", "seats:\n  only: {kind: script, script: seats/s.yaml}\n")
		code, _, errOut := cfgRun(t, dir, nil, "rehearse", "--config", "conf/p.yaml", "--jobs", "1", "--log", "out.log")
		assert.Contains(t, []int{ExitOK, ExitRefuse}, code, errOut)
		data, err := os.ReadFile(filepath.Join(dir, "out.log"))
		require.NoError(t, err)
		assert.Contains(t, string(data), "seat=only")
	})
}

// Ctrl-C while a big config is parsed ends the command at once.
func TestConfigReadingIsInterruptible(t *testing.T) {
	dir := t.TempDir()
	var sb strings.Builder
	sb.WriteString("seats:\n")
	for i := 0; sb.Len() < maxConfigBytes-100; i++ {
		fmt.Fprintf(&sb, "  s%d: {kind: script, script: builtin:seed003}\n", i)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big.yaml"), []byte(sb.String()), 0o600))
	t.Chdir(dir)
	ios, _, _, errOut := TestStreams()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the user pressed Ctrl-C
	f := &Factory{IO: ios, Now: time.Now, Getenv: func(string) string { return "" }, Ctx: ctx}
	code := Run(f, []string{"simulate", "--config", "big.yaml", "--jobs", "1"})
	assert.Equal(t, ExitRefuse, code)
	assert.Contains(t, errOut.String(), `interrupted while reading config "big.yaml"`)
}

func TestConfigEmptyValuesAndLiteralKeys(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ text, want string }{
		{"budget:\n  deadline:\n", "retrygate.yaml:2: budget.deadline: no value"},
		{"seats:\n  a: {kind: openai, base_url: http://127.0.0.1:1/v1, model: m, API_Key: sk-live-abcdef123456}\n",
			"retrygate.yaml:2: seats.a.api_key: a literal API key in a config file is refused"},
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(tc.text), 0o600))
		code, _, errOut := cfgRun(t, dir, nil, admitArgs...)
		assert.Equal(t, ExitBad, code)
		assert.Contains(t, errOut, tc.want)
		assert.NotContains(t, errOut, "abcdef123456")
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte("budget:\nthresholds:\nseats:\n"), 0o600))
	code, _, errOut := cfgRun(t, dir, nil, admitArgs...)
	assert.Equal(t, ExitOK, code, "empty sections are fine: %s", errOut)
}

// An empty mapping is judged alike in every format: an empty known
// section or seat is fine, an unknown one is an unknown key, with its line.
func TestConfigEmptyMappingsAlikeInEveryFormat(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ file, text, want string }{
		{"c.yaml", "budget: {}\nseats:\n  a: {}\n", ""},
		{"c.json", `{"budget": {}, "seats": {"a": {}}}`, ""},
		{"c.toml", "[budget]\n[seats.a]\n", ""},
		{"c.toml", "budget = {}\n", ""},
		{"c.yaml", "budget: {}\nbogus: {}\n", "c.yaml:2: bogus: unknown key"},
		{"c.json", "{\"budget\": {},\n \"bogus\": {}}", "c.json:2: bogus: unknown key"},
		{"c.toml", "[budget]\n\n[bogus]\n", "c.toml:3: bogus: unknown key"},
		{"c.toml", "[budget]\nbogus = {}\n", "c.toml:2: budget.bogus: unknown key"},
		{"c.toml", "[retry.budgett]\n", "c.toml:1: retry.budgett: unknown key"},
	} {
		path := filepath.Join(dir, tc.file)
		require.NoError(t, os.WriteFile(path, []byte(tc.text), 0o600))
		code, _, errOut := cfgRun(t, dir, nil, append([]string{"--config", path}, admitArgs...)...)
		if tc.want == "" {
			assert.Equal(t, ExitOK, code, "%s %q: %s", tc.file, tc.text, errOut)
			continue
		}
		assert.Equal(t, ExitBad, code, "%s %q", tc.file, tc.text)
		assert.Contains(t, errOut, tc.want, "%s %q", tc.file, tc.text)
	}
}
