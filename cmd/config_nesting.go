// A config's nesting, counted in its bytes before any parser reads them.

package cmd

import (
	"bytes"
	"strings"
)

// checkNesting refuses a config nested deeper than maxConfigDepth before
// any parser reads it (go-toml recurses once per level and overflows its
// stack on a 2 MB file of nested arrays): brackets and braces outside
// strings and comments in every format, and YAML's indented blocks.
func checkNesting(data []byte, ext string) error {
	isYAML, isTOML := ext == "yaml", ext == "toml"
	line, flow, indent := 1, 0, 0
	var blocks []int   // YAML: the indentation of each open block
	scalar := -1       // YAML: the indentation of a block scalar's parent line
	prev := byte('\n') // the last byte outside strings and spaces
	for i := 0; i < len(data); {
		b := data[i]
		switch {
		case b == '\n':
			if isYAML && blockScalar(data[:i]) {
				scalar = indent
			}
			line, prev = line+1, '\n'
			i++
			continue
		case prev == '\n':
			j := i
			for j < len(data) && data[j] == ' ' {
				j++
			}
			switch {
			case j < len(data) && data[j] == '\r':
				i = j + 1 // a line end of its own, or before '\n'
				continue
			case j == len(data) || data[j] == '\n' || data[j] == '#':
				i = lineEnd(data, j) // a blank line, or a comment
				continue
			}
			indent = j - i
			if isYAML && flow == 0 {
				if scalar >= 0 && indent > scalar {
					i = lineEnd(data, j) // a block scalar's text
					continue
				}
				scalar = -1
				for len(blocks) > 0 && blocks[len(blocks)-1] >= indent {
					blocks = blocks[:len(blocks)-1]
				}
				blocks = append(blocks, indent)
				for k := j; k+1 < len(data) && data[k] == '-' && data[k+1] == ' '; {
					for k++; k < len(data) && data[k] == ' '; k++ {
					}
					blocks = append(blocks, k-i) // "- - x": a sequence in a sequence
				}
			}
			i, prev = j, ' '
		case b == '#' && (!isYAML || prev == ' ' || data[i-1] == '\t'):
			i = lineEnd(data, i)
			continue
		case b == '"' || b == '\'':
			if isYAML && strings.IndexByte(" :-[{,?", prev) < 0 {
				break // a quote inside a plain scalar: don't
			}
			end := closeQuote(data, i, isTOML)
			line += bytes.Count(data[i:end], []byte("\n"))
			i, prev = end, b
			continue
		case b == '[' || b == '{':
			flow++
		case b == ']' || b == '}':
			flow = max(flow-1, 0)
		}
		if flow+len(blocks) > maxConfigDepth {
			return errAt(line, "", "nested deeper than %d levels", maxConfigDepth)
		}
		if b != ' ' && b != '\t' && b != '\r' {
			prev = b
		}
		i++
	}
	return nil
}

func lineEnd(data []byte, i int) int {
	if j := bytes.IndexByte(data[i:], '\n'); j >= 0 {
		return i + j
	}
	return len(data)
}

// blockScalar reports whether a YAML line (the end of before) opens a
// block scalar: it ends in | or > and their indicators (key: |-).
func blockScalar(before []byte) bool {
	s := bytes.TrimRight(before[bytes.LastIndexByte(before, '\n')+1:], " \t\r")
	s = bytes.TrimRight(s, "-+0123456789")
	return len(s) >= 2 && (s[len(s)-1] == '|' || s[len(s)-1] == '>') && (s[len(s)-2] == ' ' || s[len(s)-2] == ':')
}

// closeQuote is the index past the string that opens at data[i]: a
// double-quoted one (backslash escapes; TOML's ends with its line, or is
// triple-quoted), or a single-quoted one (YAML doubles a quote inside
// it; TOML's ends with its line, or is triple-quoted).
func closeQuote(data []byte, i int, toml bool) int {
	q := data[i]
	if toml && i+2 < len(data) && data[i+1] == q && data[i+2] == q {
		delim := []byte{q, q, q}
		for j := i + 3; j < len(data); j++ {
			if q == '"' && data[j] == '\\' {
				j++
			} else if bytes.HasPrefix(data[j:], delim) {
				return j + 3
			}
		}
		return len(data)
	}
	for j := i + 1; j < len(data); j++ {
		switch {
		case data[j] == '\n' && toml:
			return j
		case q == '"' && data[j] == '\\':
			j++
		case data[j] == q && q == '\'' && !toml && j+1 < len(data) && data[j+1] == '\'':
			j++ // YAML's '' inside single quotes
		case data[j] == q:
			return j + 1
		}
	}
	return len(data)
}
