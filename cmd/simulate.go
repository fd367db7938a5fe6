package cmd

import "github.com/spf13/cobra"

// SimulateOptions is a placeholder until the command lands.
type SimulateOptions struct{}

func newSimulateCmd(f *Factory, runF func(*SimulateOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:    "simulate",
		Short:  "(not built yet)",
		Hidden: true,
		RunE: func(c *cobra.Command, args []string) error {
			return badInput("simulate: not built yet")
		},
	}
}
