package cmd

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// retrygateBinary builds the real binary once per test run, for tests
// that need separate processes (many writers, SIGKILL).
func retrygateBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "retrygate-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "retrygate")
		// Built as README's install line builds it: static, no cgo.
		build := exec.Command("go", "build", "-o", binPath, "..")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := build.CombinedOutput()
		if err != nil {
			binErr = &buildError{out: string(out), err: err}
		}
	})
	if binErr != nil {
		t.Fatalf("building retrygate: %v", binErr)
	}
	return binPath
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// stressEnv turns the process-spawning stress tests up to full size
// (16,000 record processes on one log, 64 claimers per cleanup case).
// The README's test command runs them small, which keeps every race they
// prove real (16 writers, 16 claimers for a cap of 5, at once) in a few
// seconds; .ci/run runs them full size in a step of their own.
const stressEnv = "RETRYGATE_STRESS"

// stressSize is small, or full when RETRYGATE_STRESS is set.
func stressSize(t testing.TB, small, full int) int {
	t.Helper()
	if os.Getenv(stressEnv) != "" {
		return full
	}
	t.Logf("%d of %d (%s=1 runs it full size, as .ci/run does)", small, full, stressEnv)
	return small
}
