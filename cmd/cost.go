package cmd

import "github.com/spf13/cobra"

// CostOptions is a placeholder until the command lands.
type CostOptions struct{}

func newCostCmd(f *Factory, runF func(*CostOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:    "cost",
		Short:  "(not built yet)",
		Hidden: true,
		RunE: func(c *cobra.Command, args []string) error {
			return badInput("cost: not built yet")
		},
	}
}
