//go:build unix

package ledgerfile

import "syscall"

const (
	// noFollow refuses a symbolic link as a log's last path component.
	noFollow = syscall.O_NOFOLLOW
	// nonBlock keeps opening a FIFO from waiting for a writer.
	nonBlock = syscall.O_NONBLOCK
)
