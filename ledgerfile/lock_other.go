//go:build !unix

package ledgerfile

import (
	"os"

	"github.com/gofrs/flock"
)

// fileLock is a portable advisory lock on the log's path.
type fileLock struct{ fl *flock.Flock }

func newFileLock(_ *os.File, path string) fileLock {
	return fileLock{flock.New(path, flock.SetFlag(os.O_RDONLY))}
}

func (l fileLock) lock() error { return l.fl.Lock() }
func (l fileLock) unlock()     { _ = l.fl.Unlock() }
func (l fileLock) close()      { _ = l.fl.Close() }
