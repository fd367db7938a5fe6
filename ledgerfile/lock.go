package ledgerfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
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

// HeldError is a file log whose one long-lived writer's lock (HoldLog)
// another process holds: PID is the holder's, as its lock file says (0
// when it says none).
type HeldError struct {
	Log, Lock string
	PID       int
}

func (e *HeldError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("log %q is held by %s (its lock %q)", e.Log, who, e.Lock)
}

// LockSuffix names a file log's lock file: the log's path and this.
const LockSuffix = ".lock"

// HoldLog takes the lock of the one long-lived writer that keeps a file
// log's books in memory (a proxy): an exclusive FileLock on the log's
// path plus LockSuffix, made if need be, holding pid, for as long as the
// writer runs. A second one is refused at once with a *HeldError naming
// the holder's pid. Writers that read the books from the log itself
// under its own lock at each row (record, rehearse) never take it.
// release removes the lock file and gives the lock back; a process that
// dies gives it back with its descriptors, and the next HoldLog takes it.
func HoldLog(path string, pid int) (release func(), err error) {
	lockPath := path + LockSuffix
	for range 3 {
		fl := NewFileLock(lockPath, flock.SetFlag(os.O_RDWR|os.O_CREATE|noFollow|nonBlock), flock.SetPermissions(0o644))
		ok, err := fl.fl.TryLock()
		if err != nil {
			return nil, fmt.Errorf("failed to lock %q: %w", lockPath, unwrapPath(err))
		}
		if !ok {
			return nil, &HeldError{Log: path, Lock: lockPath, PID: holderPID(lockPath)}
		}
		// A holder that stopped removes the file after our open and
		// before our lock: ours is then a file nobody else would lock.
		at, err := os.Lstat(lockPath)
		own, err2 := fl.Stat()
		if err != nil || err2 != nil || !os.SameFile(at, own) {
			_ = fl.Unlock()
			continue
		}
		if err := writePID(lockPath, pid); err != nil {
			_ = fl.Unlock()
			return nil, err
		}
		return func() {
			_ = os.Remove(lockPath)
			_ = fl.Unlock()
		}, nil
	}
	return nil, fmt.Errorf("failed to lock %q: it keeps being replaced", lockPath)
}

// writePID writes pid as the lock file's one line.
func writePID(lockPath string, pid int) error {
	f, err := os.OpenFile(lockPath, os.O_WRONLY|os.O_TRUNC|noFollow|nonBlock, 0)
	if err != nil {
		return fmt.Errorf("failed to write %q: %w", lockPath, unwrapPath(err))
	}
	_, err = f.WriteString(strconv.Itoa(pid) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("failed to write %q: %w", lockPath, unwrapPath(err))
	}
	return nil
}

// holderPID is the pid a lock file holds, or 0.
func holderPID(lockPath string) int {
	f, err := os.OpenFile(lockPath, os.O_RDONLY|noFollow|nonBlock, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	var b [32]byte
	n, _ := io.ReadFull(f, b[:])
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
