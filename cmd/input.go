package cmd

import (
	"errors"
	"fmt"
	"os"

	"github.com/retrygate/retrygate/ledgerfile"
)

// Bounds on the small files retrygate reads whole. The largest real
// policy or script is a few KiB; 4 MiB holds some 80,000 seats (read in
// about two seconds) and keeps a runaway file from exhausting memory.
const (
	maxConfigBytes = 4 << 20
	maxScriptBytes = 4 << 20
)

// checkInputFile says what is wrong with path as a small input file: it
// must exist, be a regular file (not a directory, a FIFO or a device,
// which could block or never end) and be at most limit bytes (a whole
// number of MiB). The error does not name the file: the caller does,
// with the key or flag.
func checkInputFile(path string, limit int64) error {
	st, err := os.Stat(path)
	if err != nil {
		return unwrapPathErr(err)
	}
	if st.IsDir() {
		return errors.New("is a directory")
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s)", ledgerfile.FileKind(st.Mode()))
	}
	if st.Size() > limit {
		return fmt.Errorf("larger than %d MiB (the limit)", limit>>20)
	}
	return nil
}
