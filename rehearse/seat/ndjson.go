package seat

import (
	"bytes"
	"io"
)

// NDJSONReader splits a newline-delimited JSON body (Ollama's
// application/x-ndjson) into lines through fixed buffers. It does not
// decode the JSON: a malformed line is the caller's to tolerate or
// classify. A line longer than the limit yields ErrTooLong instead of
// growing memory.
type NDJSONReader struct {
	lines *lineReader
}

// NewNDJSONReader reads lines from r, each bounded by max bytes (MaxLine
// when max <= 0).
func NewNDJSONReader(r io.Reader, max int) *NDJSONReader {
	return &NDJSONReader{lines: newLineReader(r, max)}
}

// Next returns the next non-blank line, trimmed of surrounding
// whitespace; the slice is valid until the following call. It returns
// ErrTooLong once for an over-long line (and may be called again to
// carry on), and io.EOF or the underlying read error at the end.
func (n *NDJSONReader) Next() ([]byte, error) {
	for {
		line, err := n.lines.next()
		if err != nil {
			return nil, err
		}
		line = bytes.TrimSpace(line)
		if len(line) > 0 {
			return line, nil
		}
	}
}

// Release hands the reader's buffers back for the next body's reader.
// Neither the reader nor a line it returned may be used afterwards.
func (n *NDJSONReader) Release() {
	if n.lines == nil {
		return
	}
	n.lines.release()
	n.lines = nil
}
