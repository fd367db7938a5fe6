//go:build unix

package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// The books file is opened without following a symbolic link and without
// waiting on a FIFO.
const (
	stateFlags = os.O_RDWR | os.O_CREATE | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	readFlags  = os.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK
)
