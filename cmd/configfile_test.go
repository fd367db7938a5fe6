package cmd

import (
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
			_, _, _ = c.policy()
			_, _ = c.thresholds()
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
