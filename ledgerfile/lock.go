package ledgerfile

import (
	"context"
	"os"

	"github.com/gofrs/flock"
)

// FileLock is the one advisory lock retrygate takes on a file: the log
// writer's around each append, and the claim state's around each update
// (gofrs/flock: flock(2) on Unix, LockFileEx on Windows). It opens the
// file by its path when it locks, read-only, never following a symbolic
// link and never waiting on a FIFO, and closes it when it unlocks; the
// file must exist. A lock the process still holds ends with it.
type FileLock struct{ fl *flock.Flock }

// NewFileLock prepares the lock on path; nothing is opened yet.
func NewFileLock(path string) *FileLock {
	return &FileLock{flock.New(path, flock.SetFlag(os.O_RDONLY|noFollow|nonBlock))}
}

// Lock takes the lock, waiting for its holder; a done ctx ends the wait
// (Ctrl-C), and the lock, if it comes later, is given back at once.
func (l *FileLock) Lock(ctx context.Context) error {
	if ok, err := l.fl.TryLock(); ok || err != nil {
		return err
	}
	if ctx.Done() == nil {
		return l.fl.Lock()
	}
	done := make(chan error, 1)
	go func() { done <- l.fl.Lock() }()
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
