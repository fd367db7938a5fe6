// The config file: read bounded, its keys checked in one pass over the
// parsed nodes (lines kept, unknown keys and keys that differ only in
// case refused), then handed to viper.

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
	"strings"
	"sync"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"go.yaml.in/yaml/v3"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// maxConfigValues bounds the nodes a config expands to (YAML aliases can
// multiply a small file).
const maxConfigValues = 1 << 21

// maxConfigDepth bounds nesting; a real config nests three levels.
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

// keyCollision is two keys of one mapping that are the same key once case
// is ignored (or the same key twice).
type keyCollision struct{ first, second string }

func (e *keyCollision) Error() string {
	return fmt.Sprintf("%s: the same key as %s (keys ignore case; each may be given once)", e.second, e.first)
}

// load checks a config file's keys and gives its bytes to viper.
func (c *config) load(path, ext string, data []byte) error {
	var keys map[string]fileKey
	var root map[string]any
	var err error
	switch ext {
	case "toml":
		keys, err = tomlKeys(path, data)
	case "json":
		keys, err = jsonKeys(path, data)
	default:
		keys, root, err = yamlKeys(path, data)
	}
	switch {
	case err != nil:
	case ext == "yaml":
		// Already parsed: viper's own YAML decoding checks every key of
		// a mapping against every other (40,000 seats took a minute).
		err = c.v.MergeConfigMap(root)
	default:
		c.v.SetConfigType(ext)
		err = c.v.ReadConfig(bytes.NewReader(data))
	}
	if err != nil {
		var kc *keyCollision
		if errors.As(err, &kc) {
			return badInput("%v", err)
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			err = fmt.Errorf("line %d: %s", row, de.Error())
		}
		return badInput("config %q: %v", path, err)
	}
	c.file = path
	for k, fk := range keys {
		c.lines[k] = fk.line
	}
	for _, k := range slices.SortedFunc(maps.Keys(keys), c.byLine) {
		if err := c.checkKey(k, keys[k]); err != nil {
			return err
		}
	}
	return nil
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
	if fk.null && (slices.Contains(sections, k) || strings.HasPrefix(k, "seats.") && strings.Count(k, ".") == 1) {
		return nil // an empty section
	}
	if lookupSetting(k) == nil {
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

// suggestKey finds the known key nearest a mistyped one, keeping the
// user's seat or metric name in place of '*'.
func suggestKey(k string) (string, bool) {
	parts := strings.Split(k, ".")
	var cands []string
	for _, s := range settings {
		np := strings.Split(s.key, ".")
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

// noteKey records a key, refusing one given twice in any case in one
// mapping (each table of a TOML array of tables is a mapping of its own).
func noteKey(file string, keys map[string]fileKey, full string, fk fileKey) error {
	if first, dup := keys[full]; dup && first.table == fk.table {
		return &keyCollision{first: ref(file, first.line, first.shown), second: ref(file, fk.line, fk.shown)}
	}
	keys[full] = fk
	return nil
}

// yamlKeys walks a YAML document's nodes once: every dotted key
// (lowercased), its line, a refusal of keys given twice in any case, and
// the values, for viper.
func yamlKeys(file string, data []byte) (map[string]fileKey, map[string]any, error) {
	keys, root := map[string]fileKey{}, map[string]any{}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return keys, root, nil // an empty file
		}
		return nil, nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, nil, fmt.Errorf("line %d: a second YAML document (a config is one document)", extra.Line)
	}
	n := &doc
	if len(n.Content) == 0 {
		return keys, root, nil
	}
	if n = n.Content[0]; n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return keys, root, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("line %d: the config must be a mapping of sections (budget:, seats:, …)", n.Line)
	}
	budget := maxConfigValues
	var walk func(n *yaml.Node, key, shown string, depth int) (any, error)
	walk = func(n *yaml.Node, key, shown string, depth int) (any, error) {
		if budget--; budget < 0 {
			return nil, fmt.Errorf("more than %d values (aliases expanding?)", maxConfigValues)
		}
		if depth > maxConfigDepth {
			return nil, fmt.Errorf("line %d: nested deeper than %d levels (an alias inside itself?)", n.Line, maxConfigDepth)
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
			var v any
			if err := n.Decode(&v); err != nil {
				return nil, fmt.Errorf("line %d: %s: %v", n.Line, shown, err)
			}
			return v, nil
		case yaml.MappingNode:
			m := make(map[string]any, len(n.Content)/2)
			seen := map[string]fileKey{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				kn, vn := n.Content[i], n.Content[i+1]
				if kn.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("line %d: a key must be a plain word", kn.Line)
				}
				lk := strings.ToLower(kn.Value)
				full, fullShown := joinKey(key, lk), joinKey(shown, kn.Value)
				if first, dup := seen[lk]; dup {
					return nil, &keyCollision{first: ref(file, first.line, first.shown), second: ref(file, kn.Line, fullShown)}
				}
				v := vn
				for v.Kind == yaml.AliasNode && v.Alias != nil && depth < maxConfigDepth {
					v = v.Alias
				}
				fk := fileKey{line: kn.Line, shown: fullShown, section: v.Kind == yaml.MappingNode && len(v.Content) > 0,
					null: v.Kind == yaml.ScalarNode && v.Tag == "!!null" || v.Kind == yaml.MappingNode && len(v.Content) == 0}
				seen[lk], keys[full] = fk, fk
				var err error
				if m[lk], err = walk(vn, full, fullShown, depth+1); err != nil {
					return nil, err
				}
			}
			return m, nil
		}
		return nil, fmt.Errorf("line %d: %s: unexpected YAML", n.Line, shown)
	}
	v, err := walk(n, "", "", 0)
	if err != nil {
		return nil, nil, err
	}
	return keys, v.(map[string]any), nil
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

// jsonKeys is yamlKeys for JSON, read by encoding/json's tokens (YAML
// does not read every JSON string: "\/" is JSON's, not YAML's).
func jsonKeys(file string, data []byte) (map[string]fileKey, error) {
	keys := map[string]fileKey{}
	if len(bytes.TrimSpace(data)) == 0 {
		return keys, nil
	}
	line := lineAt(data)
	dec := json.NewDecoder(bytes.NewReader(data))
	fail := func(err error) error {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("line %d: %v", line(dec.InputOffset()), err)
	}
	// value reads one value; it reports a non-empty object and a null.
	var value func(key, shown string, depth int) (bool, bool, error)
	value = func(key, shown string, depth int) (bool, bool, error) {
		if depth > maxConfigDepth {
			return false, false, fmt.Errorf("line %d: nested deeper than %d levels", line(dec.InputOffset()), maxConfigDepth)
		}
		tok, err := dec.Token()
		if err != nil {
			return false, false, fail(err)
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]fileKey{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return false, false, fail(err)
				}
				k := kt.(string) // the decoder gives only strings as object keys
				lk, ln := strings.ToLower(k), line(dec.InputOffset())
				full, fullShown := joinKey(key, lk), joinKey(shown, k)
				if first, dup := seen[lk]; dup {
					return false, false, &keyCollision{first: ref(file, first.line, first.shown), second: ref(file, ln, fullShown)}
				}
				section, null, err := value(full, fullShown, depth+1)
				if err != nil {
					return false, false, err
				}
				seen[lk] = fileKey{line: ln, shown: fullShown, section: section, null: null}
				keys[full] = seen[lk]
			}
			_, err := dec.Token()
			return len(seen) > 0, len(seen) == 0, err
		case json.Delim('['):
			for dec.More() {
				if _, _, err := value(key, shown, depth+1); err != nil {
					return false, false, err
				}
			}
			_, err := dec.Token()
			return false, false, err
		}
		return false, tok == nil, nil
	}
	if bytes.TrimSpace(data)[0] != '{' {
		return nil, errors.New("the config must be an object of sections (budget, seats, …)")
	}
	if _, _, err := value("", "", 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("line %d: text after the config's closing brace", line(dec.InputOffset()))
	}
	return keys, nil
}

// tomlKeys notes the line of every key of a TOML file and refuses a key
// given twice in any case, naming both lines. Syntax errors are left to
// the decoder, which names their line.
func tomlKeys(file string, data []byte) (map[string]fileKey, error) {
	keys := map[string]fileKey{}
	lineOf := lineAt(data)
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
	var keyval func(n *unstable.Node, prefix, shown string) error
	keyval = func(n *unstable.Node, prefix, shown string) error {
		full, fullShown, line := keyOf(n, prefix, shown)
		v := n.Value()
		if err := noteKey(file, keys, full, fileKey{line: line, shown: fullShown, section: v.Kind == unstable.InlineTable, table: table}); err != nil {
			return err
		}
		if v.Kind == unstable.InlineTable {
			for it := v.Children(); it.Next(); {
				if c := it.Node(); c.Kind == unstable.KeyValue {
					if err := keyval(c, full, fullShown); err != nil {
						return err
					}
				}
			}
		}
		return nil
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
				if err := noteKey(file, keys, prefix, fileKey{line: line, shown: shown, section: true, table: table}); err != nil {
					return nil, err
				}
			}
		case unstable.KeyValue:
			if err := keyval(e, prefix, shown); err != nil {
				return nil, err
			}
		}
	}
	// A table with no key under it is an empty mapping, judged as YAML's {}.
	parents := map[string]bool{}
	for k := range keys {
		if i := strings.LastIndexByte(k, '.'); i > 0 {
			parents[k[:i]] = true
		}
	}
	for k, fk := range keys {
		if fk.section && !parents[k] {
			fk.section, fk.null = false, true
			keys[k] = fk
		}
	}
	return keys, nil
}
