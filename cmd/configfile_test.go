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
