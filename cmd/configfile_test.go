package cmd

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// FuzzConfig feeds any bytes to the config reader in every format: it
// never panics, keys come out case-folded and unique, and a config it
// accepts resolves to a policy or an error, never a crash.
func FuzzConfig(f *testing.F) {
	for _, s := range []string{
		"budget: {deadline: 45s, token_ceiling: 8000, max_attempts: 2, max_wait: 5s}\nseats:\n  a: {kind: script, script: builtin:seed003}\nfallback: [a]\nthresholds:\n  wait_s: [\"p(95) < 5\"]\n",
		"budget:\n  deadline: 45s\n  Deadline: 1ms\n",
		"a: &x {b: *x}\n",
		"{\"budget\": {\"deadline\": \"45s\", \"deadline\": 1}}",
		"[budget]\ndeadline = \"45s\"\n[seats.a]\nkind = \"script\"\nscript = \"builtin:seed003\"\n",
		"x = {y = 1, Y = 2}\n",
		// Numbers in every spelling, in every form: read as decimals, or refused.
		"budget: {max_attempts: 010, deadline: 010, max_spend_usd: 0x1p-4}\nbreaker: {failure_rate: .inf, min_requests: 0o10}\n",
		"budget:\n  max_attempts: 0b1\n  token_ceiling: 1_000\nseats:\n  a: {kind: script, script: builtin:seed003, extra_body: {seed: 0x10, t: 010}}\n",
		"[budget]\nmax_attempts = 0o10\ndeadline = 0x10\ntoken_ceiling = 1_000\n[seats.a]\nextra_body = {seed = 0b1, t = inf}\n",
		"[budget]\nmax_attempts = 010\n",
		"{\"budget\": {\"max_attempts\": \"010\", \"deadline\": 1e3, \"token_ceiling\": -0}}",
		// Nesting past the bound, in every form, and strings that only look nested.
		"a = " + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "\n",
		"a: " + strings.Repeat("{b: ", 40) + "1" + strings.Repeat("}", 40) + "\n",
		"a:\n" + strings.Repeat("- ", 40) + "x\n",
		"a: \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"\nb: |\n  {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{\n",
		"x = '''[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n'''\ny = \"\"\"]]]\"\"\"\n\r[[[[\r\n",
		// Syntax errors, so their line and key are found.
		"budget:\n  deadline: 45s\n  max_wait: [5s\nretry: {}\n",
		"budget: - 1\n",
		"{\"budget\": {\"deadline\": \"45s\",\n \"max_wait\": }}",
		"[budget]\ndeadline = \"45s\"\nmax_wait = 5s\n",
		"\r ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, ext := range []string{"yaml", "json", "toml"} {
			c := newConfig()
			if err := c.load("f."+ext, ext, []byte(text)); err != nil {
				continue
			}
			for k := range c.lines {
				if k != strings.ToLower(k) {
					t.Fatalf("%s: key %q kept its case", ext, k)
				}
			}
			_, _ = c.budget()
			_, seats, _ := c.policy()
			_, _ = c.thresholds()
			_ = c.places(slices.Collect(maps.Values(seats)))
		}
	})
}

// Each table of a TOML array of tables ([[x]]) is a mapping of its own:
// a key in two of them is no repeat, a key twice in one still is.
func TestConfigTOMLArrayOfTables(t *testing.T) {
	seat := "[seats.a]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n"
	c := newConfig()
	if err := c.load("p.toml", "toml", []byte(seat+"[[seats.a.extra_body.tools]]\ntype = \"function\"\n[[seats.a.extra_body.tools]]\ntype = \"web_search\"\n")); err != nil {
		t.Fatalf("two tables of one array refused: %v", err)
	}
	// Three tables of one array, each with a table under it.
	three := "[[seats.a.extra_body.tools]]\ntype = \"function\"\n[seats.a.extra_body.tools.function]\nname = \"f\"\n"
	if err := newConfig().load("p.toml", "toml", []byte(seat+three+three+three)); err != nil {
		t.Fatalf("three tables of one array refused: %v", err)
	}
	err := newConfig().load("p.toml", "toml", []byte(seat+"[[seats.a.extra_body.tools]]\ntype = \"function\"\n[[seats.a.extra_body.tools]]\ntype = \"x\"\nTYPE = \"y\"\n"))
	if err == nil || !strings.Contains(err.Error(), "p.toml:9: seats.a.extra_body.tools.TYPE: the same key as p.toml:8: seats.a.extra_body.tools.type") {
		t.Fatalf("a key twice in one table: got %v", err)
	}
}
