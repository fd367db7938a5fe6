//go:build unix

package store

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A FIFO or a symbolic link at the log's path is refused by Scan, as by
// every other reader of a log, not waited on (a FIFO would hang `log
// export` and `rehearse`'s run numbering) or followed.
func TestFileScanRefusesWhatIsNotALog(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.log")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	target := filepath.Join(dir, "elsewhere.log")
	require.NoError(t, os.WriteFile(target, []byte("wait_s=1 elapsed_s=2 tokens=3\n"), 0o644))
	link := filepath.Join(dir, "link.log")
	require.NoError(t, os.Symlink(target, link))
	for path, want := range map[string]string{fifo: "a FIFO, not a regular file", link: "is a symbolic link"} {
		done := make(chan error, 1)
		go func() { done <- OpenFile(path, false).Scan(context.Background(), func(Entry) error { return nil }) }()
		select {
		case err := <-done:
			require.ErrorContains(t, err, want, path)
		case <-time.After(10 * time.Second):
			t.Fatalf("Scan of %s is still waiting", path)
		}
	}
}
