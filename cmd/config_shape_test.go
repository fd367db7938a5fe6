package cmd

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// admitBudget runs admit and returns the budget column of its table:
// row name → the budget's value.
func admitBudget(t *testing.T, dir string, env map[string]string, args ...string) (code int, budget map[string]string, errOut string) {
	t.Helper()
	code, out, errOut := cfgRun(t, dir, env, append(admitArgs[:len(admitArgs):len(admitArgs)], args...)...)
	budget = map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Split(line, "\t"); len(f) > 1 {
			budget[f[0]] = f[1]
		}
	}
	return code, budget, errOut
}

// One number means one thing whatever its source: a leading zero is a
// decimal's (010 is ten) in every config form, the environment and a
// flag; hex, octal, binary and underscores are no number anywhere, and
// are refused with the file:line and key, the variable or the flag.
func TestConfigNumbersAreDecimalEverywhere(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file, text string
		env              map[string]string
		args             []string
	}{
		{"yaml", "p.yaml", "budget:\n  max_attempts: 010\n  deadline: 010\n", nil, nil},
		{"yaml flow", "p.yaml", "budget: {max_attempts: 010, deadline: 010}\n", nil, nil},
		{"yaml quoted", "p.yaml", "budget: {max_attempts: \"010\", deadline: '010'}\n", nil, nil},
		{"json", "p.json", `{"budget": {"max_attempts": "010", "deadline": "010"}}`, nil, nil},
		{"toml", "p.toml", "[budget]\nmax_attempts = \"010\"\ndeadline = \"010\"\n", nil, nil},
		{"environment", "", "", map[string]string{"RETRYGATE_BUDGET_MAX_ATTEMPTS": "010", "RETRYGATE_BUDGET_DEADLINE": "010"}, nil},
		{"flags", "", "", nil, []string{"--max-attempts", "010", "--deadline", "010"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				writeFile(t, dir, tc.file, tc.text)
				args = append(args, "--config", tc.file)
			}
			code, budget, errOut := admitBudget(t, dir, tc.env, args...)
			require.Equal(t, ExitOK, code, errOut)
			assert.Equal(t, "10", budget["attempts"], "010 attempts are ten")
			assert.Equal(t, "10.000s", budget["deadline"], "a deadline of 010 is ten seconds")
		})
	}

	for _, v := range []string{"0x10", "0o10", "0b1", "1_0", "0X1A"} {
		for _, tc := range []struct {
			name, file, text string
			env              map[string]string
			args             []string
			want             string
		}{
			{"yaml", "p.yaml", "budget:\n  max_attempts: " + v + "\n", nil, nil, `p.yaml:2: budget.max_attempts: not a whole number "` + v + `"`},
			{"yaml duration", "p.yaml", "retry: {base_delay: 1s}\nbudget:\n  deadline: " + v + "\n", nil, nil, `p.yaml:3: budget.deadline: not a duration "` + v + `"`},
			{"json", "p.json", "{\"budget\": {\n\"max_attempts\": \"" + v + "\"}}", nil, nil, `p.json:2: budget.max_attempts: not a whole number "` + v + `"`},
			{"toml", "p.toml", "[budget]\nmax_attempts = " + strings.ToLower(v) + "\n", nil, nil,
				`p.toml:2: budget.max_attempts: not a whole number "` + strings.ToLower(v) + `"`},
			{"toml duration", "p.toml", "[budget]\ndeadline = " + strings.ToLower(v) + "\n", nil, nil,
				`p.toml:2: budget.deadline: not a duration "` + strings.ToLower(v) + `"`},
			{"environment", "", "", map[string]string{"RETRYGATE_BUDGET_MAX_ATTEMPTS": v}, nil,
				`RETRYGATE_BUDGET_MAX_ATTEMPTS: not a whole number "` + v + `"`},
			{"flag", "", "", nil, []string{"--max-attempts", v}, `--max-attempts: not a whole number "` + v + `"`},
		} {
			if strings.HasPrefix(tc.name, "toml") && v == "0X1A" {
				continue // TOML's grammar has no upper-case prefix
			}
			t.Run(tc.name+" "+v, func(t *testing.T) {
				args := tc.args
				if tc.file != "" {
					writeFile(t, dir, tc.file, tc.text)
					args = append(args, "--config", tc.file)
				}
				code, _, errOut := admitBudget(t, dir, tc.env, args...)
				assert.Equal(t, ExitBad, code, errOut)
				assert.Contains(t, errOut, "retrygate: "+tc.want)
			})
		}
	}

	// TOML has no leading zero, and says so at the line and key.
	writeFile(t, dir, "z.toml", "[budget]\nmax_attempts = 010\n")
	code, _, errOut := admitBudget(t, dir, nil, "--config", "z.toml")
	assert.Equal(t, ExitBad, code)
	assert.Contains(t, errOut, "retrygate: z.toml:2: budget.max_attempts: a number with a leading zero")

	// Numbers a seat sends as they are (extra_body) are decimals too.
	for file, text := range map[string]string{
		"e.yaml": "seats:\n  a:\n    kind: script\n    script: builtin:seed003\n    extra_body: {seed: 0x10}\n",
		"e.toml": "[seats.a]\nkind = \"script\"\nscript = \"builtin:seed003\"\nextra_body = {seed = 0x10}\n",
	} {
		writeFile(t, dir, file, text)
		code, _, errOut := admitBudget(t, dir, nil, "--config", file)
		assert.Equal(t, ExitBad, code, file)
		assert.Regexp(t, `retrygate: e\.(yaml|toml):[45]: seats\.a\.extra_body\.seed: not a decimal number "0x10"`, errOut)
	}
	for ext, text := range map[string]string{
		"yaml": "seats:\n  a: {kind: script, script: builtin:seed003, extra_body: {seed: 010, t: 0.5, tools: [1, 2.5]}}\n",
		"json": `{"seats": {"a": {"kind": "script", "script": "builtin:seed003", "extra_body": {"seed": 10, "t": 0.5, "tools": [1, 2.5]}}}}`,
		"toml": "[seats.a]\nkind = \"script\"\nscript = \"builtin:seed003\"\nextra_body = {seed = 10, t = 0.5, tools = [1, 2.5]}\n",
	} {
		c := newConfig()
		require.NoError(t, c.load("p."+ext, ext, []byte(text)))
		_, seats, err := c.policy()
		require.NoError(t, err, ext)
		assert.Equal(t, map[string]any{"seed": int64(10), "t": 0.5, "tools": []any{int64(1), 2.5}}, seats["a"].ExtraBody, ext)
	}
}

// Nesting is bounded before any parser reads the bytes: the 2 MB TOML of
// a million nested arrays that overflowed go-toml's stack, and as deep a
// YAML or JSON, are exit 2 at the line and key.
func TestConfigNestingBoundedInEveryFormat(t *testing.T) {
	dir := t.TempDir()
	const n = 1_000_000
	for _, tc := range []struct{ file, text, want string }{
		{"deep.toml", "[budget]\ndeadline = \"1s\"\n[seats.a]\nextra_body = {x = " + strings.Repeat("[", n) + strings.Repeat("]", n) + "}\n",
			"deep.toml:4: seats.a.extra_body: nested deeper than 32 levels"},
		{"inline.toml", "a = " + strings.Repeat("{b = ", n/5) + "1" + strings.Repeat("}", n/5) + "\n", "inline.toml:1: a: nested deeper than 32 levels"},
		{"deep.json", "{\"seats\": {\"a\": {\"extra_body\": " + strings.Repeat("[", n) + strings.Repeat("]", n) + "}}}",
			"deep.json:1: extra_body: nested deeper than 32 levels"},
		{"flow.yaml", "seats:\n  a:\n    extra_body: " + strings.Repeat("[", n) + "\n", "flow.yaml:3: seats.a.extra_body: nested deeper than 32 levels"},
		{"dashes.yaml", "fallback:\n" + strings.Repeat("- ", n) + "a\n", "dashes.yaml:2: fallback: nested deeper than 32 levels"},
		{"indent.yaml", "a:\n" + func() string {
			var b strings.Builder
			for i := range 1000 {
				b.WriteString(strings.Repeat(" ", i+1) + "b:\n")
			}
			return b.String()
		}(), "indent.yaml:33: a.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b: nested deeper than 32 levels"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			writeFile(t, dir, tc.file, tc.text)
			code, out, errOut := cfgRun(t, dir, nil, append([]string{"--config", tc.file}, admitArgs...)...)
			assert.Equal(t, ExitBad, code)
			assert.Empty(t, out)
			assert.Contains(t, errOut, "retrygate: "+tc.want)
		})
	}
	// A real config's nesting is far inside the bound: a tool's schema
	// under extra_body, a block scalar, strings holding brackets.
	writeFile(t, dir, "ok.yaml", `seats:
  a:
    kind: script
    script: builtin:seed003
    extra_body:
      note: "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
      prompt: |
        {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{
                    deeply indented text
      tools:
        - type: function
          function:
            parameters:
              type: object
              properties:
                where: {type: object, properties: {city: {type: string}}}
`)
	code, _, errOut := cfgRun(t, dir, nil, append([]string{"--config", "ok.yaml"}, admitArgs...)...)
	assert.Equal(t, ExitOK, code, errOut)
	writeFile(t, dir, "ok.toml", "[seats.a]\nkind = \"script\"\nscript = \"builtin:seed003\"\n"+
		"extra_body = {note = \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\", raw = '{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{'}\n"+
		"# [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n")
	code, _, errOut = cfgRun(t, dir, nil, append([]string{"--config", "ok.toml"}, admitArgs...)...)
	assert.Equal(t, ExitOK, code, errOut)
}

// Every config error has one shape, file:line: key: message — a syntax
// error in each format, a key variable that is not set, a base URL
// without a scheme — and none quotes a secret.
func TestConfigErrorsHaveOneShape(t *testing.T) {
	dir := t.TempDir()
	seatArgs := []string{"rehearse", "--jobs", "1", "--log", "out.log"}
	for _, tc := range []struct {
		name, file, text string
		args             []string
		want             string
	}{
		{"yaml syntax", "p.yaml", "budget:\n  deadline: 45s\n  max_wait: [5s\nretry: {}\n", admitArgs,
			"p.yaml:3: budget.max_wait: did not find expected ',' or ']'"},
		{"yaml indentation", "p.yaml", "budget:\n  deadline: 45s\n   max_wait: 5s\n", admitArgs,
			"p.yaml:3: budget.deadline.max_wait: mapping values are not allowed in this context"},
		{"yaml first line", "p.yaml", "budget: - 1\n", admitArgs, "p.yaml:1: budget: block sequence entries are not allowed in this context"},
		{"json syntax", "p.json", "{\"budget\": {\"deadline\": \"45s\",\n \"max_wait\": }}", admitArgs,
			"p.json:2: budget.max_wait: invalid character '}' looking for beginning of value"},
		{"toml syntax", "p.toml", "[budget]\ndeadline = \"45s\"\nmax_wait = 5s\n", admitArgs,
			"p.toml:3: budget.max_wait: "},
		{"a key variable not set", "p.yaml", "seats:\n  a:\n    kind: openai\n    base_url: http://127.0.0.1:1/v1\n    model: m\n    api_key_env: RG_SHAPE_UNSET_KEY\n",
			seatArgs, "p.yaml:6: seats.a.api_key_env: environment variable RG_SHAPE_UNSET_KEY is not set"},
		{"a key variable not set, time", "p.yaml", "seats:\n  a: {kind: anthropic, base_url: http://127.0.0.1:1, model: m, api_key_env: RG_SHAPE_UNSET_KEY}\n",
			[]string{"time", "--seat", "a"}, "p.yaml:2: seats.a.api_key_env: environment variable RG_SHAPE_UNSET_KEY is not set"},
		{"a header variable not set", "p.yaml", "seats:\n  a:\n    kind: openai\n    base_url: http://127.0.0.1:1/v1\n    model: m\n    headers:\n      X-Team: RG_SHAPE_UNSET_TEAM\n",
			seatArgs, "p.yaml:7: seats.a.headers.x-team: environment variable RG_SHAPE_UNSET_TEAM is not set"},
		{"a base URL without a scheme", "p.yaml", "seats:\n  a:\n    kind: openai\n    base_url: 127.0.0.1:6556/v1?key=sk-live-abcdef123456\n    model: m\n",
			seatArgs, "p.yaml:4: seats.a.base_url: no scheme (want http:// or https://)"},
		{"a base URL without a scheme, check", "p.toml", "[seats.a]\nkind = \"ollama\"\nbase_url = \"localhost:11434\"\nmodel = \"m\"\n" +
			"[thresholds]\nwait_s = [\"p(95) < 5\"]\n", []string{"check", "../testdata/logs/seed003.log"},
			"p.toml:3: seats.a.base_url: no scheme (want http:// or https://)"},
		{"a bad value", "p.yaml", "breaker:\n  failure_rate: lots\n", admitArgs, `p.yaml:2: breaker.failure_rate: not a rate "lots"`},
		{"a list where a value goes", "p.yaml", "budget:\n  deadline: [1s, 2s]\n", admitArgs, "p.yaml:2: budget.deadline: expected a single value, got a list"},
		{"a value where a section goes", "p.yaml", "budget: 45s\n", admitArgs, "p.yaml:1: budget: expected a mapping of keys, got a single value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, dir, tc.file, tc.text)
			args := append([]string{"--config", tc.file}, tc.args...)
			if tc.args[0] == "check" {
				args = []string{"check", "--policy", tc.file, repoPath(t, "testdata/logs/seed003.log")}
			}
			code, out, errOut := cfgRun(t, dir, nil, args...)
			assert.Equal(t, ExitBad, code, errOut)
			assert.Empty(t, out)
			first, _, _ := strings.Cut(errOut, "\n")
			assert.Regexp(t, `^retrygate: [a-z.]+:\d+: [A-Za-z0-9_.\-]+: \S`, first, "file:line: key: message")
			assert.Contains(t, errOut, "retrygate: "+tc.want)
			assert.NotContains(t, errOut, "abcdef123456")
			assert.NoFileExists(t, filepath.Join(dir, "out.log"))
		})
	}
}

// Every key of the table decodes into its field from a file, as its kind
// reads it, and the # policy line writes back what was read.
func TestConfigEveryKeyDecodes(t *testing.T) {
	sample := map[rehearse.Kind]string{rehearse.Duration: "1500ms", rehearse.Count: "3", rehearse.USD: "0.25",
		rehearse.Amount: "0.5", rehearse.Rate: "25%", rehearse.Bool: "false", rehearse.Text: "t", rehearse.List: "[a]",
		rehearse.Words: "[sh, -c, x]", rehearse.Map: "{X-K: RG_V}", rehearse.Routes: `[{model: "m-*", fallback: [a]}]`}
	var b strings.Builder
	section := ""
	for _, k := range rehearse.Keys {
		name := strings.ReplaceAll(k.Name, "*", "a")
		v := sample[k.Kind]
		switch name {
		case "seats.a.kind":
			v = "openai"
		case "seats.a.api":
			v = "chat"
		case "timeouts.soft", "retry.base_delay":
			v = "1s"
		case rehearse.KeyThresholds, "thresholds.a":
			name, v = "thresholds.wait_s", `["p(95) < 5"]`
		}
		sec, rest, _ := strings.Cut(name, ".")
		if rest == "" {
			b.WriteString(name + ": " + v + "\n")
			section = ""
			continue
		}
		if sec != section {
			b.WriteString(sec + ":\n")
			section = sec
		}
		b.WriteString("  " + rest + ": " + v + "\n")
	}
	c := newConfig()
	require.NoError(t, c.load("all.yaml", "yaml", []byte(b.String())), b.String())
	r, err := c.resolve()
	require.NoError(t, err)
	want := map[rehearse.Kind]string{rehearse.Duration: "1.5s", rehearse.Count: "3", rehearse.USD: "0.25", rehearse.Amount: "0.5",
		rehearse.Rate: "0.25", rehearse.Bool: "false", rehearse.Text: "t"}
	sc := r.seats["a"]
	for _, k := range rehearse.Keys {
		var got string
		switch {
		case k.Field != nil:
			got = rehearse.FormatValue(k.Field(&r.policy))
		case k.SeatField != nil:
			got = rehearse.FormatValue(k.SeatField(&sc))
		default:
			continue
		}
		if w, ok := want[k.Kind]; ok && k.Name != "seats.*.kind" && k.Name != "seats.*.api" && k.Name != "timeouts.soft" && k.Name != "retry.base_delay" {
			assert.Equal(t, w, got, k.Name)
		}
	}
	assert.Equal(t, []string{"sh", "-c", "x"}, sc.Command)
	assert.Equal(t, map[string]string{"x-k": "RG_V"}, sc.Headers)
	assert.Equal(t, map[string]any{"x-k": "RG_V"}, sc.ExtraBody)
	assert.Equal(t, []string{"a"}, r.fallback)
	assert.Equal(t, []rehearse.Route{{Model: "m-*", Fallback: []string{"a"}}}, r.routes)
	assert.Equal(t, "t", r.log)
	assert.Equal(t, time.Second, r.policy.Timeouts.Soft)
	line := rehearse.PolicyLine(1, r.policy, []seat.Config{sc}, nil, nil)
	for _, k := range []string{"budget.deadline=1.5s", "budget.max_spend_usd=0.25", "retry.budget.ratio=0.25", "breaker.failure_rate=0.25",
		"seats.a.kind=openai", "seats.a.price_cache_write=0.25"} {
		assert.Contains(t, line, k)
	}
	assert.Regexp(t, regexp.MustCompile(`hash=[0-9a-f]{12}$`), line)
}
