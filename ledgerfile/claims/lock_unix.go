//go:build unix

package claims

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

const noFollow = unix.O_NOFOLLOW | unix.O_NONBLOCK

// openState opens the state file for update, creating it when missing. It
// never follows a symbolic link and never blocks on a FIFO.
func openState(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
}

// lockFile takes an exclusive flock on f, waiting for the holder; Ctrl-C
// (ctx) ends the wait.
func lockFile(ctx context.Context, f *os.File) error {
	fd := int(f.Fd())
	err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if !errors.Is(err, unix.EWOULDBLOCK) {
		return err
	}
	done := make(chan error, 1)
	go func() {
		for {
			err := unix.Flock(fd, unix.LOCK_EX)
			if !errors.Is(err, unix.EINTR) {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
