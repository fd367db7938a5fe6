package script

import "testing"

// TestLazyRegexpsCompile: the package's regexps, compiled on first use,
// are all valid, so first use never panics.
func TestLazyRegexpsCompile(t *testing.T) {
	for _, l := range []*lazyRE{numberRE, intRE, codeRE, yamlLineRE, yamlAnchorRE} {
		if l.get() == nil {
			t.Fatalf("%q did not compile", l.expr)
		}
	}
}
