package cmd

import "github.com/spf13/cobra"

// AdmitOptions is a placeholder until the command lands.
type AdmitOptions struct{}

func newAdmitCmd(f *Factory, runF func(*AdmitOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:    "admit",
		Short:  "(not built yet)",
		Hidden: true,
		RunE: func(c *cobra.Command, args []string) error {
			return badInput("admit: not built yet")
		},
	}
}
