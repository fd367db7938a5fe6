//go:build !unix

package claims

import "os"

const noFollow = 0

func openState(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
