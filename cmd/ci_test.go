package cmd

import (
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCITestRunsEveryModule: .ci/test, the README's test command, runs
// the nested SDK modules even when the main module fails, and still
// fails; its arguments (.ci/test -count=1) reach every module. A stand-in `go` on PATH records each call and fails the main
// module's, so the script's own logic is what runs.
func TestCITestRunsEveryModule(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: .ci/test lists the nested modules with git ls-files")
	}
	mods, err := exec.Command("git", "-C", flagRepo, "ls-files", "*/go.mod").Output()
	if err != nil || len(strings.Fields(string(mods))) == 0 {
		t.Skip("not a git checkout with nested modules")
	}
	bin := t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	fake := `#!/bin/sh
echo "$*" >> "$CALLS"
case "$1" in test) exit 1;; esac
exit 0
`
	require.NoError(t, os.WriteFile(filepath.Join(bin, "go"), []byte(fake), 0o755))
	c := exec.Command("bash", filepath.Join(flagRepo, ".ci", "test"), "-count=1")
	c.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "CALLS="+calls)
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the main module failed: .ci/test must fail\n%s", out)
	assert.Equal(t, 1, ee.ExitCode())
	data, err := os.ReadFile(calls)
	require.NoError(t, err)
	for _, mod := range strings.Fields(string(mods)) {
		assert.Contains(t, string(data), "-C "+filepath.Dir(mod)+" test", "nested module %s ran after the main module failed\n%s", filepath.Dir(mod), out)
		assert.Regexp(t, `(?m)^-C `+regexp.QuoteMeta(filepath.Dir(mod))+` test .*-count=1`, string(data), "nested module %s got .ci/test's arguments", filepath.Dir(mod))
	}
	assert.Contains(t, string(out), "FAILED: main module")
}

// default.pgo must name this module's functions: a profile taken before a
// rename (or of another module) matches nothing, and go build then runs
// without profile-guided optimisation and says nothing (docs/dev/speed.md).
// Each of the three paths bench/pgo.sh profiles is in it.
func TestDefaultPGONamesTheModule(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	path, _, _ := strings.Cut(strings.TrimPrefix(string(mod), "module "), "\n")
	f, err := os.Open("../default.pgo")
	require.NoError(t, err)
	defer f.Close()
	z, err := gzip.NewReader(f) // a pprof profile: a gzipped protocol buffer
	require.NoError(t, err)
	raw, err := io.ReadAll(z)
	require.NoError(t, err)
	for _, fn := range []string{"/ledgerfile/summary.", "/rehearse.(*Loop).RunVirtual", "/rehearse/proxy."} {
		assert.Contains(t, string(raw), path+fn, "default.pgo has no samples in %s%s: take it again with bench/pgo.sh", path, fn)
	}
}
