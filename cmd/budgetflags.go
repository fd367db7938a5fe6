package cmd

import (
	"fmt"
	"maps"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/rehearse"
)

// budgetFlags adds the four numbers (and the spend ceiling) as flags,
// from the settings table, and returns their config keys for loadConfig
// to bind.
func budgetFlags(c *cobra.Command) map[string]string {
	keys := map[string]string{}
	p := rehearse.DefaultPolicy()
	for _, s := range settings {
		if s.flag == "" {
			continue
		}
		def := "none"
		if d := s.defaultValue(&p); d != 0.0 {
			def = fmt.Sprint(d)
		}
		c.Flags().String(s.flag, "", fmt.Sprintf("%s (default %s; config %s)", s.help, def, s.key))
		keys[s.key] = s.flag
	}
	return keys
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
