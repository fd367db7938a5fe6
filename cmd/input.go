package cmd

import (
	"fmt"
	"io"
	"os"
)

// Bounds on the small files retrygate reads whole. The largest real
// policy or script is a few KiB; 4 MiB holds some 80,000 seats (read in
// about two seconds) and keeps a runaway file from exhausting memory.
const (
	maxConfigBytes = 4 << 20
	maxScriptBytes = 4 << 20
)

// checkInputFile says what is wrong with path as a small input file: it
// must exist, be a regular file (not a FIFO, a device or a directory,
// which could block or never end) and be at most limit bytes. The error
// does not name the file: the caller does, with the key or flag.
//
// The ledger engineer is adding one shared bounded opener in ledgerfile;
// this is the minimal check until cmd can call it.
func checkInputFile(path string, limit int64) error {
	st, err := os.Stat(path)
	if err != nil {
		return unwrapPathErr(err)
	}
	return checkInputStat(st, limit)
}

func checkInputStat(st os.FileInfo, limit int64) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s)", fileKind(st.Mode()))
	}
	if st.Size() > limit {
		return fmt.Errorf("larger than %s (the limit)", byteSize(limit))
	}
	return nil
}

// readInputFile reads a small input file whole, in bounded memory and
// without blocking (see checkInputFile). what names the file in errors.
func readInputFile(what, path string, limit int64) ([]byte, error) {
	if err := checkInputFile(path, limit); err != nil {
		return nil, badInput("%s %q: %v", what, path, err)
	}
	fh, err := openNoBlock(path)
	if err != nil {
		return nil, badInput("%s %q: %v", what, path, unwrapPathErr(err))
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err == nil {
		err = checkInputStat(st, limit) // the file may have changed since
	}
	if err != nil {
		return nil, badInput("%s %q: %v", what, path, err)
	}
	data, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, badInput("%s %q: %v", what, path, unwrapPathErr(err))
	}
	if int64(len(data)) > limit {
		return nil, badInput("%s %q: larger than %s (the limit)", what, path, byteSize(limit))
	}
	return data, nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0, m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return m.Type().String()
}

func byteSize(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
