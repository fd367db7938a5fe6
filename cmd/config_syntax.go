// Where a config file that does not parse went wrong: its line, from the
// parser, and the key there, read from the lines up to it.

package cmd

import (
	"bytes"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// yamlLine is where yaml.v3 puts a syntax error's line: it has no error
// type that carries it, only the text "yaml: line N: …". A scanner's
// error counts lines from 1; a parser's (yamlParserErrors) from 0, and
// the first line has no number at all.
var yamlLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`) })

var yamlParserErrors = []string{"did not find expected <stream-start>", "did not find expected <document start>",
	"found undefined tag handle", "did not find expected node content", "did not find expected '-' indicator",
	"did not find expected key", "did not find expected ',' or ']'", "did not find expected ',' or '}'",
	"found duplicate %YAML directive", "found incompatible YAML document", "found duplicate %TAG directive"}

func yamlError(err error) error {
	m := yamlLine().FindStringSubmatch(err.Error())
	if m == nil {
		return errAt(1, "", "%v", err)
	}
	line, _ := strconv.Atoi(m[1])
	if m[1] == "" || slices.Contains(yamlParserErrors, m[2]) {
		line++
	}
	return errAt(line, "", "%s", m[2])
}

// yamlKey is a block mapping key at the start of a line, after any
// sequence dashes.
var yamlKey = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^( *)((?:- +)*)("[^"]*"|'[^']*'|[^\s#'"\[\]{},:&*!|>%@` + "`" + `][^#:]*?)\s*:(\s|$)`)
})

// yamlKeyAt names the key on the last of lines, else the innermost one
// open there, from YAML's block structure.
func yamlKeyAt(lines [][]byte) string {
	type open struct {
		indent int
		key    string
	}
	var stack []open
	for _, l := range lines {
		m := yamlKey().FindSubmatch(l)
		if m == nil {
			continue
		}
		indent := len(m[1]) + len(m[2])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, open{indent, strings.Trim(string(m[3]), `"'`)})
	}
	keys := make([]string, len(stack))
	for i, o := range stack {
		keys[i] = o.key
	}
	return strings.Join(keys, ".")
}

// leadingZero reports whether the digit at off follows a number's leading
// 0 (TOML's parser stops there: "expected newline but got '1'").
func leadingZero(data []byte, off int) bool {
	digit := func(i int) bool { return i >= 0 && i < len(data) && data[i] >= '0' && data[i] <= '9' }
	return digit(off) && off >= 1 && data[off-1] == '0' && !digit(off-2) && (off < 2 || data[off-2] != '.')
}

// keyAt names the key an error at a line of a file that does not parse
// is about, read from the lines up to it: YAML's block structure, TOML's
// table and key, JSON's last key.
func keyAt(data []byte, ext string, line int) string {
	lines := bytes.SplitN(data, []byte("\n"), line+1)
	if line < 1 || line > len(lines) {
		return ""
	}
	lines = lines[:line]
	switch ext {
	case "yaml":
		return yamlKeyAt(lines)
	case "toml":
		return tomlKeyAt(lines)
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if m := jsonKey().FindAllSubmatch(lines[i], -1); m != nil {
			return string(m[len(m)-1][1])
		}
	}
	return ""
}

var (
	jsonKey   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`"((?:[^"\\]|\\.)*)"\s*:`) })
	tomlKey   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*([A-Za-z0-9_."'-]+?)\s*=`) })
	tomlTable = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*\[\[?\s*([A-Za-z0-9_."' -]+?)\s*\]`) })
)

// tomlKeyAt is the key set on the last line under the table open there.
func tomlKeyAt(lines [][]byte) string {
	unquote := strings.NewReplacer(`"`, "", "'", "", " ", "")
	table := ""
	for _, l := range lines[:len(lines)-1] {
		if m := tomlTable().FindSubmatch(l); m != nil {
			table = unquote.Replace(string(m[1]))
		}
	}
	last := lines[len(lines)-1]
	if m := tomlTable().FindSubmatch(last); m != nil {
		return unquote.Replace(string(m[1]))
	}
	if m := tomlKey().FindSubmatch(last); m != nil {
		return joinKey(table, unquote.Replace(string(m[1])))
	}
	return table
}
