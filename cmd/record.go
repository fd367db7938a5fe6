package cmd

import "github.com/spf13/cobra"

// RecordOptions is a placeholder until the command lands.
type RecordOptions struct{}

func newRecordCmd(f *Factory, runF func(*RecordOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:    "record",
		Short:  "(not built yet)",
		Hidden: true,
		RunE: func(c *cobra.Command, args []string) error {
			return badInput("record: not built yet")
		},
	}
}
