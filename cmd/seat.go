package cmd

import "github.com/spf13/cobra"

func newSeatCmd(f *Factory) *cobra.Command {
	return &cobra.Command{Use: "seat", Short: "(not built yet)", Hidden: true}
}
