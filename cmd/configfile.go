package cmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"go.yaml.in/yaml/v3"
)

// maxConfigValues bounds the values a config expands to (YAML aliases can
// multiply a small file).
const maxConfigValues = 1 << 21

// maxConfigDepth bounds nesting; a real config nests three levels.
const maxConfigDepth = 32

// configTree is a config file parsed into nested maps with lowercased keys
// (keys are case-insensitive, as environment variables are), and the line
// of every dotted key where the format gives lines.
type configTree struct {
	root  map[string]any
	lines map[string]int
}

// keyCollision is two keys of one mapping that are the same key once case
// is ignored (or the same key twice).
type keyCollision struct {
	first, second string // each "file:line: dotted.Key" or "file: dotted.Key"
}

func (e *keyCollision) Error() string {
	return fmt.Sprintf("%s: the same key as %s (keys ignore case; each may be given once)", e.second, e.first)
}

// parseConfig parses data in format ("yaml", "json" or "toml"). Every
// mapping is checked for keys given twice, in any case.
func parseConfig(file, format string, data []byte) (*configTree, error) {
	t := &configTree{root: map[string]any{}, lines: map[string]int{}}
	switch format {
	case "yaml":
		return t, t.fromYAML(file, data)
	case "json":
		return t, t.fromJSON(file, data)
	case "toml":
		return t, t.fromTOML(file, data)
	}
	return nil, fmt.Errorf("unknown format %q (want .yaml, .json or .toml)", format)
}

func ref(file string, line int, key string) string {
	if line > 0 {
		return fmt.Sprintf("%s:%d: %s", file, line, key)
	}
	return fmt.Sprintf("%s: %s", file, key)
}

func joinKey(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

// --- YAML

func (t *configTree) fromYAML(file string, data []byte) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return fmt.Errorf("line %d: a second YAML document (a config is one document)", extra.Line)
	}
	n := &doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	budget := maxConfigValues
	v, err := t.yamlValue(file, n, "", "", &budget, 0)
	if err != nil {
		return err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("line %d: the config must be a mapping of sections (budget:, seats:, …)", n.Line)
	}
	t.root = m
	return nil
}

func (t *configTree) yamlValue(file string, n *yaml.Node, key, shown string, budget *int, depth int) (any, error) {
	if *budget--; *budget < 0 {
		return nil, fmt.Errorf("more than %d values (aliases expanding?)", maxConfigValues)
	}
	if depth > maxConfigDepth {
		return nil, fmt.Errorf("line %d: nested deeper than %d levels (an alias inside itself?)", n.Line, maxConfigDepth)
	}
	depth++
	switch n.Kind {
	case yaml.AliasNode:
		return t.yamlValue(file, n.Alias, key, shown, budget, depth)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		seen := make(map[string]int, len(n.Content)/2)
		names := make(map[string]string, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			if kn.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a key must be a plain word", kn.Line)
			}
			lk := strings.ToLower(kn.Value)
			full, fullShown := joinKey(key, lk), joinKey(shown, kn.Value)
			if line, dup := seen[lk]; dup {
				return nil, &keyCollision{first: ref(file, line, names[lk]), second: ref(file, kn.Line, fullShown)}
			}
			seen[lk], names[lk] = kn.Line, fullShown
			t.lines[full] = kn.Line
			v, err := t.yamlValue(file, vn, full, fullShown, budget, depth)
			if err != nil {
				return nil, err
			}
			m[lk] = v
		}
		return m, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := t.yamlValue(file, c, key, shown, budget, depth)
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
	}
	return nil, fmt.Errorf("line %d: %s: unexpected YAML", n.Line, shown)
}

// --- JSON

func (t *configTree) fromJSON(file string, data []byte) error {
	starts := lineStarts(data)
	lineAt := func(off int64) int { return sort.Search(len(starts), func(i int) bool { return starts[i] > int(off) }) }
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	budget := maxConfigValues
	depth := 0
	var value func(key, shown string) (any, error)
	value = func(key, shown string) (any, error) {
		if budget--; budget < 0 {
			return nil, fmt.Errorf("more than %d values", maxConfigValues)
		}
		if depth++; depth > maxConfigDepth {
			return nil, fmt.Errorf("line %d: nested deeper than %d levels", lineAt(dec.InputOffset()), maxConfigDepth)
		}
		defer func() { depth-- }()
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr(err, lineAt(dec.InputOffset()))
		}
		switch tok {
		case json.Delim('{'):
			m := map[string]any{}
			seen := map[string]int{}
			names := map[string]string{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, jsonErr(err, lineAt(dec.InputOffset()))
				}
				k := kt.(string) // the decoder only gives strings as object keys
				line := lineAt(dec.InputOffset() - 1)
				lk := strings.ToLower(k)
				full, fullShown := joinKey(key, lk), joinKey(shown, k)
				if first, dup := seen[lk]; dup {
					return nil, &keyCollision{first: ref(file, first, names[lk]), second: ref(file, line, fullShown)}
				}
				seen[lk], names[lk] = line, fullShown
				t.lines[full] = line
				v, err := value(full, fullShown)
				if err != nil {
					return nil, err
				}
				m[lk] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, jsonErr(err, lineAt(dec.InputOffset()))
			}
			return m, nil
		case json.Delim('['):
			var out []any
			for dec.More() {
				v, err := value(key, shown)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, jsonErr(err, lineAt(dec.InputOffset()))
			}
			return out, nil
		case nil:
			return nil, nil
		}
		if n, ok := tok.(json.Number); ok {
			return jsonNumber(n), nil
		}
		return tok, nil
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	v, err := value("", "")
	if err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("line %d: text after the config's closing brace", lineAt(dec.InputOffset()))
	}
	m, ok := v.(map[string]any)
	if !ok {
		return errors.New("the config must be an object of sections (budget, seats, …)")
	}
	t.root = m
	return nil
}

func jsonNumber(n json.Number) any {
	if i, err := n.Int64(); err == nil {
		return i
	}
	if f, err := n.Float64(); err == nil {
		return f
	}
	return string(n)
}

func jsonErr(err error, line int) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("line %d: %v", line, err)
}

// lineStarts is the offset of each line's first byte.
func lineStarts(data []byte) []int {
	starts := []int{0}
	for i, b := range data {
		if b == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// --- TOML

func (t *configTree) fromTOML(file string, data []byte) error {
	if err := t.tomlLines(file, data); err != nil {
		return err
	}
	var raw map[string]any
	if err := toml.Unmarshal(data, &raw); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return fmt.Errorf("line %d: %s", row, de.Error())
		}
		return err
	}
	m, err := lowerTOML(file, raw, "", "")
	if err != nil {
		return err
	}
	t.root = m
	return nil
}

// tomlLines notes the line of every key and refuses a key given twice in
// any case, naming both lines. Syntax errors are left to the decoder.
func (t *configTree) tomlLines(file string, data []byte) error {
	starts := lineStarts(data)
	lineAt := func(off uint32) int {
		return sort.Search(len(starts), func(i int) bool { return starts[i] > int(off) })
	}
	type seenKey struct {
		line  int
		shown string
	}
	seen := map[string]seenKey{}
	keyOf := func(n *unstable.Node, prefix, shown string) (string, string, int) {
		it := n.Key()
		line := 0
		for it.Next() {
			k := it.Node()
			prefix, shown = joinKey(prefix, strings.ToLower(string(k.Data))), joinKey(shown, string(k.Data))
			line = lineAt(k.Raw.Offset)
		}
		return prefix, shown, line
	}
	note := func(full, shown string, line int) error {
		if first, dup := seen[full]; dup {
			return &keyCollision{first: ref(file, first.line, first.shown), second: ref(file, line, shown)}
		}
		seen[full] = seenKey{line, shown}
		t.lines[full] = line
		return nil
	}
	var keyval func(n *unstable.Node, prefix, shown string) error
	keyval = func(n *unstable.Node, prefix, shown string) error {
		full, fullShown, line := keyOf(n, prefix, shown)
		if err := note(full, fullShown, line); err != nil {
			return err
		}
		if v := n.Value(); v.Kind == unstable.InlineTable {
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
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			var line int
			prefix, shown, line = keyOf(e, "", "")
			if e.Kind == unstable.Table {
				if err := note(prefix, shown, line); err != nil {
					return err
				}
			}
		case unstable.KeyValue:
			if err := keyval(e, prefix, shown); err != nil {
				return err
			}
		}
	}
	return nil // a syntax error is reported by the decoder, with its line
}

// lowerTOML lowercases keys, refusing two that differ only in case (TOML
// itself refuses a key given twice). TOML gives no lines to its values.
func lowerTOML(file string, raw map[string]any, key, shown string) (map[string]any, error) {
	ks := make([]string, 0, len(raw))
	for k := range raw {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	m := make(map[string]any, len(raw))
	names := map[string]string{}
	for _, k := range ks {
		lk := strings.ToLower(k)
		full, fullShown := joinKey(key, lk), joinKey(shown, k)
		if first, dup := names[lk]; dup {
			return nil, &keyCollision{first: ref(file, 0, first), second: ref(file, 0, fullShown)}
		}
		names[lk] = fullShown
		v := raw[k]
		if sub, ok := v.(map[string]any); ok {
			var err error
			if v, err = lowerTOML(file, sub, full, fullShown); err != nil {
				return nil, err
			}
		}
		m[lk] = v
	}
	return m, nil
}

// --- lookups

// get returns the value at a dotted key, or nil.
func (t *configTree) get(key string) any {
	var cur any = t.root
	for part := range strings.SplitSeq(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[part]; !ok {
			return nil
		}
	}
	return cur
}

// leaves lists every dotted key that holds a value (not a mapping), sorted.
func (t *configTree) leaves() []string {
	var out []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			full := joinKey(prefix, k)
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
				walk(full, sub)
				continue
			}
			out = append(out, full)
		}
	}
	walk("", t.root)
	slices.Sort(out)
	return out
}
