package cmd

import "github.com/spf13/cobra"

// addCommands registers every subcommand. Shell completion comes from
// cobra's built-in `completion` command.
func addCommands(root *cobra.Command, f *Factory) {
	root.AddCommand(
		newAdmitCmd(f, nil),
		newRecordCmd(f, nil),
		newClaimCmd(f, nil),
		newRehearseCmd(f, nil),
		newTimeCmd(f, nil),
		newSeatCmd(f),
		newProxyCmd(f, nil),
		newReportCmd(f, nil),
		newCheckCmd(f, nil),
		newTuneCmd(f, nil),
		newSimulateCmd(f, nil),
		newCostCmd(f, nil),
		newDBCmd(f), newLogCmd(f),
	)
}
