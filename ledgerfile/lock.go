package ledgerfile

import (
	"context"
	"errors"
	"os"
	"syscall"

	"github.com/gofrs/flock"
)

// FileLock is the one advisory lock retrygate takes on a file: the log
// writer's around each append, and the claim state's around each update
// (gofrs/flock: flock(2) on Unix, LockFileEx on Windows). It opens the
// file by its path when it locks, read-only, never following a symbolic
// link and never waiting on a FIFO, and closes it when it unlocks; the
// file must exist. A lock the process still holds ends with it.
type FileLock struct{ fl *flock.Flock }

// NewFileLock prepares the lock on path; nothing is opened yet. opts
// change how Lock opens the file (flock.SetFlag, SetPermissions): the
// jobs' books create theirs.
func NewFileLock(path string, opts ...flock.Option) *FileLock {
	return &FileLock{flock.New(path, append([]flock.Option{flock.SetFlag(os.O_RDONLY | noFollow | nonBlock)}, opts...)...)}
}

// Lock takes the lock, waiting for its holder; a done ctx ends the wait
// (Ctrl-C), and the lock, if it comes later, is given back at once.
func (l *FileLock) Lock(ctx context.Context) error {
	if ok, err := l.fl.TryLock(); ok || err != nil {
		return err
	}
	wait := func() error {
		for {
			if err := l.fl.Lock(); !errors.Is(err, syscall.EINTR) {
				return err
			}
		}
	}
	if ctx.Done() == nil {
		return wait()
	}
	done := make(chan error, 1)
	go func() { done <- wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		go func() {
			if <-done == nil {
				_ = l.fl.Unlock()
			}
		}()
		return ctx.Err()
	}
}

// Unlock releases the lock and closes what Lock opened.
func (l *FileLock) Unlock() error { return l.fl.Unlock() }

// Stat is the file Lock opened, while it is held: the caller checks that
// it is still the one at the path.
func (l *FileLock) Stat() (os.FileInfo, error) { return l.fl.Stat() }
