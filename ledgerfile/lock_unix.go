//go:build unix

package ledgerfile

import (
	"errors"
	"os"
	"syscall"
)

// fileLock is flock(2) on the writer's own descriptor: one system call to
// take, one to release, no second open.
type fileLock struct{ fd int }

func newFileLock(f *os.File, _ string) fileLock { return fileLock{int(f.Fd())} }

func (l fileLock) lock() error {
	for {
		err := syscall.Flock(l.fd, syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func (l fileLock) unlock() { _ = syscall.Flock(l.fd, syscall.LOCK_UN) }

func (l fileLock) close() {}
