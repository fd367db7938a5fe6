//go:build !unix

package claims

import (
	"context"
	"errors"
	"os"
)

const noFollow = 0

func openState(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

func lockFile(ctx context.Context, f *os.File) error {
	return errors.New("claim needs a Unix system to lock its state file")
}
