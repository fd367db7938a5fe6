// The config file: read bounded, its nesting bounded before any parser
// sees it, then one pass over its parsed nodes that keeps what viper
// cannot: each key's line, a refusal of keys given twice in any case, of
// unknown keys and of literal API keys, and each value as written, so
// that a number is read by admit's parsers alike from every source.

package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"go.yaml.in/yaml/v3"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
)

// maxConfigValues bounds the nodes a config expands to (YAML aliases can
// multiply a small file).
const maxConfigValues = 1 << 21

// maxConfigDepth bounds nesting, in the bytes before any parser reads
// them and in the nodes after (an alias inside itself); a real config
// nests a few levels, a tool's JSON schema under extra_body a dozen.
const maxConfigDepth = 32

var literalKey = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^seats\.[^.]+\.(api_key|apikey|key|token|authorization|secret|password)$`)
})

func (c *config) readFile(ctx context.Context, path string) error {
	ext := strings.TrimPrefix(filepath.Ext(path), ".")
	switch ext {
	case "yaml", "yml", "":
		ext = "yaml"
	case "json", "toml":
	default:
		return badInput("config %q: unknown format %q (want .yaml, .json or .toml)", path, ext)
	}
	if err := checkInputFile(path, maxConfigBytes); err != nil {
		return badInput("config %q: %v", path, err)
	}
	// Checked first for the message; ledgerfile.ReadInput, the one bounded
	// reader, opens without blocking and checks again (it may have changed).
	data, err := ledgerfile.ReadInput(path, "config", maxConfigBytes)
	if err != nil {
		return badInputErr(err)
	}
	if ctx == nil {
		return c.load(path, ext, data)
	}
	// Parsing a big config takes a moment; Ctrl-C ends the wait at once.
	done := make(chan error, 1)
	go func() { done <- c.load(path, ext, data) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return &exitError{Code: ExitRefuse, Err: fmt.Errorf("interrupted while reading config %q", path)}
	}
}

// fileKey is one key of the file: its line, and what it holds.
type fileKey struct {
	line    int
	shown   string // as written
	section bool   // a mapping with keys in it
	null    bool   // no value, or an empty mapping ([table], {})
	table   int    // TOML: which [[array table]] it is in (0: none)
}

// fileError is an error at a line of the config file, about a key when
// one can be named (shown as written): every config error has this one
// shape, file:line: key: message.
type fileError struct {
	line int
	key  string
	msg  string
}

func (e *fileError) Error() string { return e.msg }

func errAt(line int, key, format string, a ...any) *fileError {
	return &fileError{line: line, key: key, msg: fmt.Sprintf(format, a...)}
}

// fileTree is what one pass over a config file's nodes gives: its keys
// (dotted, lower-case) and its values for viper, each scalar as written.
type fileTree struct {
	file string
	keys map[string]fileKey
	root map[string]any
}

// load checks a config file's keys and gives its values to viper.
func (c *config) load(path, ext string, data []byte) error {
	t := &fileTree{file: path, keys: map[string]fileKey{}, root: map[string]any{}}
	err := checkNesting(data, ext)
	if err == nil {
		switch ext {
		case "toml":
			err = t.readTOML(data)
		case "json":
			err = t.readJSON(data)
		default:
			err = t.readYAML(data)
		}
	}
	if err != nil {
		var fe *fileError
		if !errors.As(err, &fe) {
			return badInput("config %q: %v", path, err)
		}
		if fe.key == "" {
			fe.key = keyAt(data, ext, fe.line)
		}
		return badInput("%s: %s", ref(path, fe.line, fe.key), fe.msg)
	}
	c.file = path
	for k, fk := range t.keys {
		c.lines[k] = fk.line
	}
	for _, k := range slices.SortedFunc(maps.Keys(t.keys), c.byLine) {
		if err := c.checkKey(k, t.keys[k]); err != nil {
			return err
		}
	}
	// The values are decoded once (config.resolve), with admit's parsers.
	return c.v.MergeConfigMap(t.root)
}

// byLine orders keys as the file has them, then by name.
func (c *config) byLine(a, b string) int {
	if d := c.lines[a] - c.lines[b]; d != 0 {
		return d
	}
	return strings.Compare(a, b)
}

// checkKey refuses a literal key, an unknown key and a known one without a value.
func (c *config) checkKey(k string, fk fileKey) error {
	if literalKey().MatchString(k) {
		return withHint(badInput("%s: a literal API key in a config file is refused", c.fileRef(k)),
			"name the environment variable that holds it instead: api_key_env: OPENAI_API_KEY")
	}
	if fk.section {
		return nil // its keys are checked
	}
	if fk.null && (isSection(k) || strings.HasPrefix(k, "seats.") && strings.Count(k, ".") == 1) {
		return nil // an empty section
	}
	if rehearse.KeyNamed(k) == nil {
		if isSection(k) {
			return badInput("%s: expected a mapping of keys, got a single value", c.fileRef(k))
		}
		err := badInput("%s: unknown key", c.fileRef(k))
		if s, ok := suggestKey(k); ok {
			return withHint(err, fmt.Sprintf("did you mean %s?", s))
		}
		return err
	}
	if fk.null {
		return badInput("%s: no value", c.fileRef(k))
	}
	return nil
}

// isSection reports whether k is a mapping of the table's keys (budget,
// retry.budget, seats, thresholds), not a key of its own.
func isSection(k string) bool {
	return slices.ContainsFunc(rehearse.Keys, func(s rehearse.Key) bool { return strings.HasPrefix(s.Name, k+".") })
}

// suggestKey finds the known key nearest a mistyped one, keeping the
// user's seat or metric name in place of '*'.
func suggestKey(k string) (string, bool) {
	parts := strings.Split(k, ".")
	var cands []string
	for _, s := range rehearse.Keys {
		np := strings.Split(s.Name, ".")
		if len(np) == len(parts) {
			for i, p := range np {
				if p == "*" {
					np[i] = parts[i]
				}
			}
			cands = append(cands, strings.Join(np, "."))
		}
	}
	return admit.Closest(k, cands)
}

func joinKey(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

// note records a key, refusing one given twice in any case in one
// mapping (each table of a TOML array of tables is a mapping of its own).
func (t *fileTree) note(full string, fk fileKey) error {
	if first, dup := t.keys[full]; dup && first.table == fk.table {
		return errAt(fk.line, fk.shown, "the same key as %s (keys ignore case; each may be given once)", ref(t.file, first.line, first.shown))
	}
	t.keys[full] = fk
	return nil
}

// inMap reports whether the value at key lies under a Map key (a seat's
// headers or extra_body), whose values go to the seat as they are typed.
func inMap(key string) bool {
	k := rehearse.KeyNamed(key)
	return k != nil && k.Kind == rehearse.Map
}

// decimalValue is a number under a Map key (extra_body's temperature):
// written as a plain decimal, read as one (010 is ten), an integer when
// it is whole; hex, octal, binary, underscores, inf and nan are refused,
// as everywhere else.
func decimalValue(text string) (any, error) {
	if s := strings.TrimPrefix(text, "+"); s != "" && strings.Trim(strings.TrimPrefix(s, "-"), "0123456789") == "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, nil
		}
	}
	f, err := admit.ParseNumber(text)
	if err != nil {
		return nil, fmt.Errorf("not a decimal number %q", admit.Shorten(text))
	}
	return f, nil
}

// readYAML walks a YAML document's nodes once.
func (t *fileTree) readYAML(data []byte) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file
		}
		return yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return errAt(extra.Line, "", "a second YAML document (a config is one document)")
	} else if !errors.Is(err, io.EOF) {
		return yamlError(err)
	}
	n := &doc
	if len(n.Content) == 0 {
		return nil
	}
	if n = n.Content[0]; n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return errAt(n.Line, "", "the config must be a mapping of sections (budget:, seats:, …)")
	}
	budget := maxConfigValues
	var walk func(n *yaml.Node, key, shown string, depth int) (any, error)
	walk = func(n *yaml.Node, key, shown string, depth int) (any, error) {
		if budget--; budget < 0 {
			return nil, errAt(n.Line, shown, "more than %d values (aliases expanding?)", maxConfigValues)
		}
		if depth > maxConfigDepth {
			return nil, errAt(n.Line, shown, "nested deeper than %d levels (an alias inside itself?)", maxConfigDepth)
		}
		switch n.Kind {
		case yaml.AliasNode:
			return walk(n.Alias, key, shown, depth+1)
		case yaml.SequenceNode:
			out := make([]any, 0, len(n.Content))
			for _, e := range n.Content {
				v, err := walk(e, key, shown, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			return out, nil
		case yaml.ScalarNode:
			return yamlScalar(n, key, shown)
		case yaml.MappingNode:
			m := make(map[string]any, len(n.Content)/2)
			seen := map[string]fileKey{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				kn, vn := n.Content[i], n.Content[i+1]
				if kn.Kind != yaml.ScalarNode {
					return nil, errAt(kn.Line, shown, "a key must be a plain word")
				}
				lk := strings.ToLower(kn.Value)
				full, fullShown := joinKey(key, lk), joinKey(shown, kn.Value)
				if first, dup := seen[lk]; dup {
					return nil, errAt(kn.Line, fullShown, "the same key as %s (keys ignore case; each may be given once)", ref(t.file, first.line, first.shown))
				}
				v := vn
				for v.Kind == yaml.AliasNode && v.Alias != nil && depth < maxConfigDepth {
					v = v.Alias
				}
				fk := fileKey{line: kn.Line, shown: fullShown, section: v.Kind == yaml.MappingNode && len(v.Content) > 0,
					null: v.Kind == yaml.ScalarNode && v.Tag == "!!null" || v.Kind == yaml.MappingNode && len(v.Content) == 0}
				seen[lk], t.keys[full] = fk, fk
				var err error
				if m[lk], err = walk(vn, full, fullShown, depth+1); err != nil {
					return nil, err
				}
			}
			return m, nil
		}
		return nil, errAt(n.Line, shown, "unexpected YAML")
	}
	v, err := walk(n, "", "", 0)
	if err != nil {
		return err
	}
	t.root = v.(map[string]any)
	return nil
}

// yamlScalar is a scalar's value for viper: as written (admit's parsers
// read it, as they read a flag or a variable: 010 is ten, 0x10 no
// number), or typed under a Map key.
func yamlScalar(n *yaml.Node, key, shown string) (any, error) {
	if n.Tag == "!!null" {
		return nil, nil
	}
	if !inMap(key) {
		return n.Value, nil
	}
	switch n.Tag {
	case "!!int", "!!float":
		v, err := decimalValue(n.Value)
		if err != nil {
			return nil, errAt(n.Line, shown, "%v", err)
		}
		return v, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, errAt(n.Line, shown, "%v", err)
		}
		return b, nil
	}
	return n.Value, nil
}

// lineAt maps a byte offset of data to its line.
func lineAt(data []byte) func(off int64) int {
	starts := []int{0}
	for i, b := range data {
		if b == '\n' {
			starts = append(starts, i+1)
		}
	}
	return func(off int64) int {
		return sort.Search(len(starts), func(i int) bool { return int64(starts[i]) > off })
	}
}

// readJSON is readYAML for JSON, read by encoding/json's tokens: YAML does
// not read every JSON string ("\/", "\ud83d\ude00") and lets text after
// the closing brace through.
func (t *fileTree) readJSON(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	line := lineAt(data)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	fail := func(shown string, err error) error {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return errAt(line(dec.InputOffset()), shown, "%v", err)
	}
	var value func(key, shown string, depth int) (any, error)
	value = func(key, shown string, depth int) (any, error) {
		if depth > maxConfigDepth {
			return nil, errAt(line(dec.InputOffset()), shown, "nested deeper than %d levels", maxConfigDepth)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, fail(shown, err)
		}
		switch tok := tok.(type) {
		case json.Delim:
			if tok == '[' {
				out := []any{}
				for dec.More() {
					v, err := value(key, shown, depth+1)
					if err != nil {
						return nil, err
					}
					out = append(out, v)
				}
				_, err := dec.Token()
				return out, err
			}
			m := map[string]any{}
			seen := map[string]fileKey{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fail(shown, err)
				}
				k := kt.(string) // the decoder gives only strings as object keys
				lk, ln := strings.ToLower(k), line(dec.InputOffset())
				full, fullShown := joinKey(key, lk), joinKey(shown, k)
				if first, dup := seen[lk]; dup {
					return nil, errAt(ln, fullShown, "the same key as %s (keys ignore case; each may be given once)", ref(t.file, first.line, first.shown))
				}
				if m[lk], err = value(full, fullShown, depth+1); err != nil {
					return nil, err
				}
				sub, _ := m[lk].(map[string]any)
				seen[lk] = fileKey{line: ln, shown: fullShown, section: len(sub) > 0, null: m[lk] == nil || sub != nil && len(sub) == 0}
				t.keys[full] = seen[lk]
			}
			_, err := dec.Token()
			return m, err
		case json.Number:
			if !inMap(key) {
				return tok.String(), nil
			}
			v, err := decimalValue(tok.String())
			if err != nil {
				return nil, errAt(line(dec.InputOffset()), shown, "%v", err)
			}
			return v, nil
		}
		return tok, nil // a string, a bool, or nil
	}
	if bytes.TrimSpace(data)[0] != '{' {
		return errAt(1, "", "the config must be an object of sections (budget, seats, …)")
	}
	v, err := value("", "", 0)
	if err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errAt(line(dec.InputOffset()), "", "text after the config's closing brace")
	}
	t.root = v.(map[string]any)
	return nil
}

// readTOML notes the line of every key of a TOML file, refuses a key
// given twice in any case (naming both lines) and a number under a Map
// key that is not a plain decimal, and keeps every number and date as
// written; go-toml's decoder gives the rest of the values.
func (t *fileTree) readTOML(data []byte) error {
	lineOf := lineAt(data)
	raw := map[string]string{} // dotted key → a number or date as written
	// Each [[array table]] is numbered; its keys, and those of the tables
	// under it, carry the number of the array table they are in.
	arrays, tables, table := map[string]int{}, 0, 0
	keyOf := func(n *unstable.Node, prefix, shown string) (string, string, int) {
		line := 0
		for it := n.Key(); it.Next(); {
			k := it.Node()
			prefix, shown = joinKey(prefix, strings.ToLower(string(k.Data))), joinKey(shown, string(k.Data))
			line = lineOf(int64(k.Raw.Offset))
		}
		return prefix, shown, line
	}
	// checkNumbers refuses, under a Map key, a number that is not a
	// plain decimal, wherever it is in v (an array, an inline table).
	var checkNumbers func(v *unstable.Node, key, shown string) error
	checkNumbers = func(v *unstable.Node, key, shown string) error {
		switch v.Kind {
		case unstable.Integer, unstable.Float:
			if _, err := decimalValue(string(v.Data)); err != nil && inMap(key) {
				return errAt(lineOf(int64(v.Raw.Offset)), shown, "%v", err)
			}
		case unstable.Array:
			for it := v.Children(); it.Next(); {
				if err := checkNumbers(it.Node(), key, shown); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var keyval func(n *unstable.Node, prefix, shown string) error
	keyval = func(n *unstable.Node, prefix, shown string) error {
		full, fullShown, line := keyOf(n, prefix, shown)
		v := n.Value()
		if err := t.note(full, fileKey{line: line, shown: fullShown, section: v.Kind == unstable.InlineTable, table: table}); err != nil {
			return err
		}
		switch v.Kind {
		case unstable.InlineTable:
			for it := v.Children(); it.Next(); {
				if c := it.Node(); c.Kind == unstable.KeyValue {
					if err := keyval(c, full, fullShown); err != nil {
						return err
					}
				}
			}
		case unstable.Integer, unstable.Float, unstable.LocalDate, unstable.LocalTime, unstable.LocalDateTime, unstable.DateTime:
			if table == 0 && !inMap(full) {
				raw[full] = string(v.Data)
			}
		}
		return checkNumbers(v, full, fullShown)
	}
	p := unstable.Parser{}
	p.Reset(data)
	prefix, shown := "", ""
	for p.NextExpression() {
		switch e := p.Expression(); e.Kind {
		case unstable.Table, unstable.ArrayTable:
			var line int
			prefix, shown, line = keyOf(e, "", "")
			table = 0
			for at, n := range arrays {
				if strings.HasPrefix(prefix, at+".") {
					table = max(table, n) // the innermost: numbered last
				}
			}
			if e.Kind == unstable.ArrayTable {
				tables++
				arrays[prefix], table = tables, tables
			} else {
				if err := t.note(prefix, fileKey{line: line, shown: shown, section: true, table: table}); err != nil {
					return err
				}
			}
		case unstable.KeyValue:
			if err := keyval(e, prefix, shown); err != nil {
				return err
			}
		}
	}
	var pe *unstable.ParserError
	if errors.As(p.Error(), &pe) {
		r := p.Range(pe.Highlight)
		msg := pe.Message
		if leadingZero(data, int(r.Offset)) {
			msg = "a number with a leading zero: TOML has none (write it without, or quote it: \"010\" reads as 10, as everywhere)"
		}
		line := p.Shape(r).Start.Line
		return errAt(line, "", "%s", msg) // keyAt names the key
	}
	// A table with no key under it is an empty mapping, judged as YAML's {}.
	parents := map[string]bool{}
	for k := range t.keys {
		if i := strings.LastIndexByte(k, '.'); i > 0 {
			parents[k[:i]] = true
		}
	}
	for k, fk := range t.keys {
		if fk.section && !parents[k] {
			fk.section, fk.null = false, true
			t.keys[k] = fk
		}
	}
	if err := toml.Unmarshal(data, &t.root); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, _ := de.Position()
			return errAt(line, strings.Join(de.Key(), "."), "%s", de.Error())
		}
		return err
	}
	// Numbers and dates as written, for admit's parsers to read.
	for k, text := range raw {
		setFolded(t.root, strings.Split(k, "."), text)
	}
	return nil
}

// setFolded sets the value at path in m, matching keys without case (the
// file's keys are unique in any case).
func setFolded(m map[string]any, path []string, v any) {
	for k := range m {
		if !strings.EqualFold(k, path[0]) {
			continue
		}
		if len(path) == 1 {
			m[k] = v
		} else if sub, ok := m[k].(map[string]any); ok {
			setFolded(sub, path[1:], v)
		}
		return
	}
}
