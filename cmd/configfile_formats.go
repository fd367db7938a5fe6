// Config files in JSON and TOML, read into the same tree as YAML: keys
// case-folded, duplicates refused, and each key's line kept.

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
)

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
