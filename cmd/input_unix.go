//go:build unix

package cmd

import (
	"os"
	"syscall"
)

// openNoBlock opens for reading without waiting for a FIFO's writer.
func openNoBlock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
