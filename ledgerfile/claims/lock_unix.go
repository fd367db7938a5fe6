//go:build unix

package claims

import (
	"os"

	"golang.org/x/sys/unix"
)

const noFollow = unix.O_NOFOLLOW | unix.O_NONBLOCK

// openState opens the state file for update, creating it when missing. It
// never follows a symbolic link and never blocks on a FIFO. Its lock is
// ledgerfile.FileLock, the log's.
func openState(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
}
