package cmd

import "github.com/spf13/cobra"

// CheckOptions is a placeholder until the command lands.
type CheckOptions struct{}

func newCheckCmd(f *Factory, runF func(*CheckOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:    "check",
		Short:  "(not built yet)",
		Hidden: true,
		RunE: func(c *cobra.Command, args []string) error {
			return badInput("check: not built yet")
		},
	}
}
