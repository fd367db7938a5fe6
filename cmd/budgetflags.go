package cmd

import (
	"time"

	"github.com/spf13/cobra"
)

// budgetFlags adds the four numbers (and the spend ceiling) as flags and
// returns their config keys, for loadConfig to bind.
func budgetFlags(c *cobra.Command) map[string]string {
	fl := c.Flags()
	fl.String("deadline", "", "job `deadline` (default 45s; config budget.deadline)")
	fl.String("token-ceiling", "", "prompt + completion `tokens` for the whole job (default 8000)")
	fl.String("max-attempts", "", "attempt `cap` (default 2)")
	fl.String("max-wait", "", "queue wait `cap`, submit to first byte (default 5s)")
	fl.String("max-spend", "", "spend ceiling in `USD` (default none)")
	return map[string]string{
		"budget.deadline":      "deadline",
		"budget.token_ceiling": "token-ceiling",
		"budget.max_attempts":  "max-attempts",
		"budget.max_wait":      "max-wait",
		"budget.max_spend_usd": "max-spend",
	}
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
