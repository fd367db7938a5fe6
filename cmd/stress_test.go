package cmd

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
)

// TestManyWriters: 16 writers at once each append 250 rows with
// `retrygate record` to one log (4,000 processes; a stress test,
// RETRYGATE_STRESS=1). Every row must read back, none torn, none lost,
// and each job's attempts numbered 1..n without gaps or duplicates — the
// jobs are shared between processes, so numbering races are real.
func TestManyWriters(t *testing.T) {
	stressTest(t)
	bin := retrygateBinary(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "rehearsal.log")
	const procs, jobs, each = 16, 4, 250
	// The writers are killed, process group and all, if the test runs out
	// of time, so no shell loop outlives the test binary.
	ctx, cancel := context.WithCancel(context.Background())
	if dl, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), dl.Add(-30*time.Second))
	}
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, procs)
	for p := 0; p < procs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One shell per writer process loop keeps Go's scheduler out of
			// the way: these are 16 independent streams of processes.
			script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do
  "$BIN" record --job "job-$((i %% %d))" --seat s%d --wait 0.5 --elapsed 1.5 --tokens 10 --log "$LOG" >/dev/null
  [ $? -le 1 ] || exit 1  # 1: recorded, and refused (past the job's budget)
  i=$((i+1)); done`, each, jobs, p)
			cmd := exec.CommandContext(ctx, "sh", "-c", script)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.Env = append(cmd.Environ(), "BIN="+bin, "LOG="+log)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("writer %d: %v: %s", p, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rows, rd, err := ledgerfile.ReadFile(log) // strict: a duplicate (job, attempt) fails here
	require.NoError(t, err)
	assert.Empty(t, rd.Torn(), "no torn lines")
	require.Len(t, rows, procs*each, "no row lost")
	next := map[string]int{}
	for _, r := range rows {
		next[r.Job]++
		require.Equal(t, next[r.Job], r.Attempt, "job %s numbered in order without gaps (line %d)", r.Job, r.Line)
		require.Equal(t, next[r.Job]-1, r.Used, "used counts the earlier attempts")
	}
	assert.Len(t, next, jobs)
	t.Logf("rows written %d, read back %d, torn %d", procs*each, len(rows), len(rd.Torn()))
}
