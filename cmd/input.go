package cmd

import (
	"errors"
	"fmt"
	"os"

	"retrygate/ledgerfile"
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
// which could block or never end) and be at most limit bytes. The error
// does not name the file: the caller does, with the key or flag.
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
		return fmt.Errorf("larger than %s (the limit)", byteSize(limit))
	}
	return nil
}

// readInputFile reads a small input file whole: checked first (see
// checkInputFile), then read through ledgerfile.ReadInput, the one bounded
// reader, which opens without blocking and checks the file again (it may
// have changed since). what names the file in errors.
func readInputFile(what, path string, limit int64) ([]byte, error) {
	if err := checkInputFile(path, limit); err != nil {
		return nil, badInput("%s %q: %v", what, path, err)
	}
	data, err := ledgerfile.ReadInput(path, what, limit)
	return data, badInputErr(err)
}

func byteSize(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
