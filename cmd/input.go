package cmd

import (
	"fmt"
	"io"
	"os"
)

// readInputFile reads a small input file (a config, a script) whole, in
// bounded memory and without blocking: anything but a regular file (a
// FIFO, /dev/zero, a directory) is refused before it is read, and a file
// past limit is refused, naming the limit. what names the file in errors.
//
// The ledger engineer is adding one shared bounded opener in ledgerfile;
// this is the minimal check until cmd can call it.
func readInputFile(what, path string, limit int64) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, badInput("%s %q: %v", what, path, unwrapPathErr(err))
	}
	if !st.Mode().IsRegular() {
		return nil, badInput("%s %q: not a regular file (%s)", what, path, fileKind(st.Mode()))
	}
	fh, err := openNoBlock(path)
	if err != nil {
		return nil, badInput("%s %q: %v", what, path, unwrapPathErr(err))
	}
	defer fh.Close()
	if st, err = fh.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, badInput("%s %q: not a regular file", what, path)
	}
	if st.Size() > limit {
		return nil, badInput("%s %q: larger than %s (the limit for a %s)", what, path, byteSize(limit), what)
	}
	data, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, badInput("%s %q: %v", what, path, unwrapPathErr(err))
	}
	if int64(len(data)) > limit {
		return nil, badInput("%s %q: larger than %s (the limit for a %s)", what, path, byteSize(limit), what)
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
