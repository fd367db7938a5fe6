//go:build !unix

package store

import "os"

const (
	stateFlags = os.O_RDWR | os.O_CREATE
	readFlags  = os.O_RDONLY
)
