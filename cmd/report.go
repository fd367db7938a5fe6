package cmd

import "github.com/spf13/cobra"

// ReportOptions is a placeholder until the command lands.
type ReportOptions struct{}

func newReportCmd(f *Factory, runF func(*ReportOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:    "report",
		Short:  "(not built yet)",
		Hidden: true,
		RunE: func(c *cobra.Command, args []string) error {
			return badInput("report: not built yet")
		},
	}
}
