package cmd

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// onPath is the `retrygate` testscript.Main puts on PATH for the whole
// test run: a copy of this test binary that runs Main as retrygate
// (TestMain). Set before any test runs (mainM.Run).
var onPath string

// mainM sees PATH as testscript.Main left it, before the tests run.
type mainM struct{ m *testing.M }

func (w mainM) Run() int {
	onPath, _ = exec.LookPath("retrygate")
	return w.m.Run()
}

// retrygateBinary is retrygate as a program of its own, for tests that
// need separate processes (many writers, SIGKILL, a PATH with retrygate
// on it): the test binary's own copy on PATH, so the package builds no
// second binary. It runs the same code as the installed one, with the
// tests' code linked beside it: a little bigger and slower to start,
// which only makes the size and start-up bounds the tests assert harder.
func retrygateBinary(t testing.TB) string {
	t.Helper()
	if onPath == "" {
		t.Fatal("no retrygate on PATH: TestMain runs testscript.Main, which puts this test binary there as retrygate")
	}
	return onPath
}

var (
	realOnce sync.Once
	realPath string
	realErr  error
)

// realBinary builds retrygate as the README's install line does (static,
// no cgo), once per run: for the start-up benchmark, which measures the
// program users run, not the test binary.
func realBinary(b *testing.B) string {
	b.Helper()
	realOnce.Do(func() {
		dir, err := os.MkdirTemp("", "retrygate-bin-")
		if err != nil {
			realErr = err
			return
		}
		realPath = filepath.Join(dir, "retrygate")
		build := exec.Command("go", "build", "-o", realPath, "..")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			realErr = &buildError{out: string(out), err: err}
		}
	})
	if realErr != nil {
		b.Fatalf("building retrygate: %v", realErr)
	}
	return realPath
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// stressEnv runs the stress and crash tests: hundreds or thousands of
// real processes (16 writers x 250 record processes on one log, 64
// claimers per cleanup case, 50 SIGKILLed rehearsals, hostile servers).
// They take minutes on two cores, so the README's test command leaves
// them out and .ci/run runs them in a step of their own.
const stressEnv = "RETRYGATE_STRESS"

// stressTest skips t unless RETRYGATE_STRESS=1.
func stressTest(t *testing.T) {
	t.Helper()
	if os.Getenv(stressEnv) == "" {
		t.Skipf("a stress test: %s=1 runs it, as .ci/run does", stressEnv)
	}
}
