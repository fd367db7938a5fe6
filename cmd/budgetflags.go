package cmd

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"retrygate/rehearse"
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
func mergeFlags(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// durFlag parses a duration flag; set is false when the flag was not given.
func durFlag(c *cobra.Command, name string) (d time.Duration, set bool, err error) {
	fl := c.Flags().Lookup(name)
	if fl == nil || !fl.Changed {
		return 0, false, nil
	}
	if d, err = parseDuration(fl.Value.String()); err != nil {
		return 0, false, badInput("--%s: %v", name, err)
	}
	return d, true, nil
}

// countFlag parses a whole-number flag.
func countFlag(c *cobra.Command, name string) (n int64, set bool, err error) {
	fl := c.Flags().Lookup(name)
	if fl == nil || !fl.Changed {
		return 0, false, nil
	}
	if n, err = parseCount(fl.Value.String()); err != nil {
		return 0, false, badInput("--%s: %v", name, err)
	}
	return n, true, nil
}

// amountFlag parses a non-negative number flag (USD, rates).
func amountFlag(c *cobra.Command, name string) (f float64, set bool, err error) {
	fl := c.Flags().Lookup(name)
	if fl == nil || !fl.Changed {
		return 0, false, nil
	}
	if f, err = parseAmount(fl.Value.String()); err != nil {
		return 0, false, badInput("--%s: %v", name, err)
	}
	return f, true, nil
}
