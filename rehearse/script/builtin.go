package script

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// The built-in scripts, so `retrygate rehearse` has a demo with no config,
// no key and no network.
//
//go:embed builtin/*.yaml
var builtinFS embed.FS

// BuiltinNames lists the built-in scripts, sorted.
func BuiltinNames() []string {
	entries, _ := fs.ReadDir(builtinFS, "builtin")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// Builtin parses the built-in script called name (see BuiltinNames).
func Builtin(name string) (*Script, error) {
	data, err := BuiltinSource(name)
	if err != nil {
		return nil, err
	}
	return Parse(data, "builtin/"+name+".yaml")
}

// builtinAliases are former names of built-in scripts, still accepted.
var builtinAliases = map[string]string{"seed003": "free-seat"}

// BuiltinSource is the YAML text of a built-in script, for printing or
// for serving it with `seat serve`.
func BuiltinSource(name string) ([]byte, error) {
	if n, ok := builtinAliases[name]; ok {
		name = n
	}
	names := BuiltinNames()
	if !slices.Contains(names, name) {
		return nil, fmt.Errorf("unknown built-in script %q (have %s)", name, strings.Join(names, ", "))
	}
	return builtinFS.ReadFile("builtin/" + name + ".yaml")
}
