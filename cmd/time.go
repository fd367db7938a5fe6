package cmd

import "github.com/spf13/cobra"

// TimeOptions is a placeholder until the command lands.
type TimeOptions struct{}

func newTimeCmd(f *Factory, runF func(*TimeOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:    "time",
		Short:  "(not built yet)",
		Hidden: true,
		RunE: func(c *cobra.Command, args []string) error {
			return badInput("time: not built yet")
		},
	}
}
