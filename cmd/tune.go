package cmd

import "github.com/spf13/cobra"

// TuneOptions is a placeholder until the command lands.
type TuneOptions struct{}

func newTuneCmd(f *Factory, runF func(*TuneOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:    "tune",
		Short:  "(not built yet)",
		Hidden: true,
		RunE: func(c *cobra.Command, args []string) error {
			return badInput("tune: not built yet")
		},
	}
}
