package cmd

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/creack/pty"
	"github.com/mattn/go-runewidth"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEightyColumns runs the README's first commands (the demo, report
// and check) as a new user would, in a terminal 80 columns wide (a
// pseudo-terminal for stdout and stderr alike): no line is wider than the
// terminal, the tables keep the decision, its reason and the times, a
// hint says what was left out, and --wide brings it back.
func TestEightyColumns(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no pseudo-terminals")
	}
	bin := retrygateBinary(t)
	dir := t.TempDir()
	repo := repoRoot(t)
	run := func(args ...string) []string {
		t.Helper()
		c := exec.Command(bin, args...)
		c.Dir = dir
		c.Env = ttyEnv()
		f, err := pty.StartWithSize(c, &pty.Winsize{Cols: 80, Rows: 40})
		if err != nil {
			t.Skipf("no pseudo-terminal here: %v", err)
		}
		var b bytes.Buffer
		_, err = io.Copy(&b, f)
		var pe *os.PathError
		if err != nil && !(errors.As(err, &pe) && errors.Is(pe.Err, syscall.EIO)) { // EIO: the other side closed
			t.Fatalf("%v: reading the terminal: %v", args, err)
		}
		_ = f.Close()
		if err := c.Wait(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 { // check's failing policy exits 1
				t.Fatalf("%v: %v\n%s", args, err, b.String())
			}
		}
		return strings.Split(strings.TrimRight(strings.ReplaceAll(b.String(), "\r\n", "\n"), "\n"), "\n")
	}
	fits := func(name string, lines []string) {
		t.Helper()
		for i, l := range lines {
			assert.LessOrEqual(t, runewidth.StringWidth(l), 80, "%s: line %d is wider than the terminal:\n%s", name, i+1, l)
		}
	}

	demo := run("rehearse")
	fits("rehearse", demo)
	text := strings.Join(demo, "\n")
	assert.Contains(t, text, "refuse: attempt cap", "the decision and its reason stay")
	assert.Contains(t, text, "~11.000", "an attempt never sent shows the gate's estimate, marked")
	assert.Contains(t, text, "left out to fit 80 columns; --wide shows them")
	assert.Less(t, index(demo, "└"), index(demo, "retrygate: hint: 5 columns left out"), "the hint follows the tables")

	report := run("report", repo+"/testdata/logs/mixed.log")
	fits("report", report)
	warn := index(report, "retrygate: warning: timeouts.soft: rests on only 4 rows")
	require.GreaterOrEqual(t, warn, 0, strings.Join(report, "\n"))
	assert.Greater(t, warn, index(report, "Suggested timeouts"), "the warning follows the figure it is about")
	assert.Equal(t, 1, strings.Count(strings.Join(report, "\n"), "timeouts.soft: rests on"), "once")

	check := run("check", "--policy", repo+"/testdata/policies/tight.yaml", repo+"/testdata/logs/mixed.log")
	fits("check", check)
	assert.Contains(t, strings.Join(check, "\n"), "check: FAIL")

	wide := strings.Join(run("rehearse", "--wide"), "\n")
	assert.Contains(t, wide, "job_end", "--wide keeps every column")
	assert.NotContains(t, wide, "left out")
}

// ttyEnv is the environment without anything that fakes a terminal or
// its width: the pseudo-terminal's own size must decide.
func ttyEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "RETRYGATE_FORCE_TTY" && k != "COLUMNS" && k != "RETRYGATE_LOG" {
			env = append(env, kv)
		}
	}
	return env
}

// index is the first line that starts with prefix, or contains it when
// no line starts with it; -1 when none does.
func index(lines []string, s string) int {
	for i, l := range lines {
		if strings.HasPrefix(l, s) {
			return i
		}
	}
	for i, l := range lines {
		if strings.Contains(l, s) {
			return i
		}
	}
	return -1
}
