package cmd

import (
	"fmt"
	"maps"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/rehearse"
)

// budgetFlags adds the four numbers (and the spend ceiling) as flags,
// from the key table (rehearse.Keys), and returns their config keys for
// loadConfig to bind.
func budgetFlags(c *cobra.Command) map[string]string {
	keys := map[string]string{}
	for _, k := range rehearse.Keys {
		if k.Flag != "" {
			maps.Copy(keys, keyFlag(c, k.Name, k.Help))
		}
	}
	return keys
}

// keyFlag adds the flag that sets key, as the key table names it, with
// help saying its default and its key; it returns key → flag for
// loadConfig to bind.
func keyFlag(c *cobra.Command, key, help string) map[string]string {
	k := rehearse.KeyNamed(key)
	p := rehearse.DefaultPolicy()
	def := rehearse.FormatValue(k.Field(&p))
	if def == "0" {
		def = "none"
	}
	c.Flags().String(k.Flag, "", fmt.Sprintf("%s (default %s; config %s)", help, def, k.Name))
	return map[string]string{k.Name: k.Flag}
}

// mergeFlags joins flag→key maps.
func mergeFlags(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// flagValue parses a flag with one of admit's parsers (admit.ParseDuration,
// ParseCount, ParseAmount); set is false when the flag was not given.
func flagValue[T any](c *cobra.Command, name string, parse func(string) (T, error)) (v T, set bool, err error) {
	fl := c.Flags().Lookup(name)
	if fl == nil || !fl.Changed {
		return v, false, nil
	}
	if v, err = parse(fl.Value.String()); err != nil {
		return v, false, badInput("--%s: %v", name, err)
	}
	return v, true, nil
}

// flagPtr is a flag's value, nil when it was not given.
func flagPtr[T any](c *cobra.Command, name string, parse func(string) (T, error)) (*T, error) {
	v, set, err := flagValue(c, name, parse)
	if !set {
		return nil, err
	}
	return &v, nil
}

// flagInto parses a flag into *dst when it was given.
func flagInto[T any](c *cobra.Command, name string, parse func(string) (T, error), dst *T) error {
	v, set, err := flagValue(c, name, parse)
	if set {
		*dst = v
	}
	return err
}
