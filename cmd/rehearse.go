package cmd

import "github.com/spf13/cobra"

// RehearseOptions is a placeholder until the command lands.
type RehearseOptions struct{}

func newRehearseCmd(f *Factory, runF func(*RehearseOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:    "rehearse",
		Short:  "(not built yet)",
		Hidden: true,
		RunE: func(c *cobra.Command, args []string) error {
			return badInput("rehearse: not built yet")
		},
	}
}
