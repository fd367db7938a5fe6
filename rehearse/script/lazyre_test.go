package script

import (
	"regexp"
	"testing"
)

// TestLazyRegexpsCompile: the package's regexps, compiled on first use,
// are all valid, so first use never panics.
func TestLazyRegexpsCompile(t *testing.T) {
	for _, re := range []func() *regexp.Regexp{codeRE, yamlLineRE, yamlAnchorRE} {
		if re() == nil {
			t.Fatal("a regexp did not compile")
		}
	}
}
