package cmd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

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
