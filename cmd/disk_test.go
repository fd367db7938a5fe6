package cmd

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordArgs appends one row to log.
func recordArgs(log string) []string {
	return []string{"record", "--job", "disk", "--max-attempts", "1000", "--wait", "1", "--elapsed", "2", "--tokens", "10", "--note", strings.Repeat("n", 300), "--log", log}
}

// mountTmpfs mounts a small tmpfs at dir, or skips when this user may not.
func mountTmpfs(t *testing.T, dir, opts string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; skipped")
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); skipped", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
}

func seedLog(t *testing.T, bin, log string) []byte {
	t.Helper()
	for i := 0; i < 3; i++ {
		out, err := exec.Command(bin, recordArgs(log)...).CombinedOutput()
		require.NoError(t, err, string(out))
	}
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	return data
}

func TestDiskFullLeavesLogUnchanged(t *testing.T) {
	bin := retrygateBinary(t)
	dir := t.TempDir()
	mountTmpfs(t, dir, "size=64k")
	log := filepath.Join(dir, "rehearsal.log")
	seedLog(t, bin, log)
	// Pad the log with a comment to 96 bytes short of a page, so the next
	// row must take a new page: the write runs out of space part-way.
	st, err := os.Stat(log)
	require.NoError(t, err)
	pad := 4096 - 96 - int(st.Size()%4096) - 3
	require.Greater(t, pad, 0)
	f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("# " + strings.Repeat("p", pad) + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	before, err := os.ReadFile(log)
	require.NoError(t, err)
	// Fill the filesystem.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	require.NoError(t, err)
	buf := make([]byte, 1024)
	for {
		if _, err := filler.Write(buf); err != nil {
			break
		}
	}
	for {
		if _, err := filler.Write(buf[:1]); err != nil {
			break
		}
	}
	filler.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, recordArgs(log)...)
	cmd.Stderr = &stderr
	err = cmd.Run()
	require.Error(t, err, "a full disk must fail the command")
	assert.Contains(t, stderr.String(), `retrygate: failed to append to log "`+log+`": no space left on device`)
	after, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, before, after, "the log is byte-for-byte unchanged")
}

func TestReadOnlyLogLeavesLogUnchanged(t *testing.T) {
	bin := retrygateBinary(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "rehearsal.log")
	if os.Geteuid() == 0 {
		// Root ignores file modes: make the filesystem itself read-only.
		mountTmpfs(t, dir, "size=1m")
		before := seedLog(t, bin, log)
		if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
			t.Skipf("cannot remount read-only (%v: %s); skipped", err, out)
		}
		checkUnchanged(t, bin, log, before, "read-only file system")
		return
	}
	before := seedLog(t, bin, log)
	require.NoError(t, os.Chmod(log, 0o444))
	checkUnchanged(t, bin, log, before, "permission denied")
}

func checkUnchanged(t *testing.T, bin, log string, before []byte, why string) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, recordArgs(log)...)
	cmd.Stderr = &stderr
	err := cmd.Run()
	require.Error(t, err)
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, ExitBad, ee.ExitCode())
	assert.Contains(t, stderr.String(), why)
	assert.Contains(t, stderr.String(), log)
	after, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, before, after)
}
