package cmd

import "github.com/spf13/cobra"

// ClaimOptions is a placeholder until the command lands.
type ClaimOptions struct{}

func newClaimCmd(f *Factory, runF func(*ClaimOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:    "claim",
		Short:  "(not built yet)",
		Hidden: true,
		RunE: func(c *cobra.Command, args []string) error {
			return badInput("claim: not built yet")
		},
	}
}
