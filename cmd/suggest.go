package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/admit"
)

// guardGroups makes a command that only groups others (seat, and any
// later) refuse an unknown subcommand with exit 2 and a "did you mean",
// instead of printing its help and exiting 0 on a typo.
func guardGroups(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c == root || c.Runnable() || !c.HasSubCommands() {
			return
		}
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			var names []string
			for _, s := range c.Commands() {
				if s.IsAvailableCommand() {
					names = append(names, s.Name())
				}
			}
			e := badInput("unknown command %q for '%s'", args[0], c.CommandPath())
			if s, ok := admit.Closest(args[0], names); ok {
				return withHint(e, fmt.Sprintf("did you mean %s %s?", c.CommandPath(), s))
			}
			return withHint(e, fmt.Sprintf("see '%s --help'", c.CommandPath()))
		}
	}
	walk(root)
}
