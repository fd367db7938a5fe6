package cmd

import "github.com/spf13/cobra"

// subcommands lists every subcommand by name with its constructor, so a
// command line that names one builds only that one (see NewRootCmd).
// Shell completion comes from cobra's built-in `completion` command.
var subcommands = []struct {
	name string
	make func(*Factory) *cobra.Command
}{
	{"admit", func(f *Factory) *cobra.Command { return newAdmitCmd(f, nil) }},
	{"record", func(f *Factory) *cobra.Command { return newRecordCmd(f, nil) }},
	{"claim", func(f *Factory) *cobra.Command { return newClaimCmd(f, nil) }},
	{"rehearse", func(f *Factory) *cobra.Command { return newRehearseCmd(f, nil) }},
	{"time", func(f *Factory) *cobra.Command { return newTimeCmd(f, nil) }},
	{"seat", newSeatCmd},
	{"proxy", func(f *Factory) *cobra.Command { return newProxyCmd(f, nil) }},
	{"report", func(f *Factory) *cobra.Command { return newReportCmd(f, nil) }},
	{"check", func(f *Factory) *cobra.Command { return newCheckCmd(f, nil) }},
	{"tune", func(f *Factory) *cobra.Command { return newTuneCmd(f, nil) }},
	{"simulate", func(f *Factory) *cobra.Command { return newSimulateCmd(f, nil) }},
	{"cost", func(f *Factory) *cobra.Command { return newCostCmd(f, nil) }},
	{"db", newDBCmd},
	{"log", newLogCmd},
}

// noSubcommands, as newRootCmd's only, builds the root alone: `--version`
// needs no command under it.
const noSubcommands = "-"

// addCommands registers every subcommand, or only the one named by only
// when only is not empty.
func addCommands(root *cobra.Command, f *Factory, only string) {
	for _, s := range subcommands {
		if only == "" || s.name == only {
			c := s.make(f)
			c.GroupID = groupOf[s.name]
			root.AddCommand(c)
		}
	}
}

// invoked is the subcommand a command line runs directly, or "" when the
// line needs the whole tree: root flags first (--version, --config, --help),
// `help`, cobra's completion commands, or a word that names no command
// (so the unknown-command hint can list the others).
func invoked(args []string) string {
	if len(args) == 0 {
		return ""
	}
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-v") {
		return noSubcommands
	}
	for _, s := range subcommands {
		if s.name == args[0] {
			return s.name
		}
	}
	return ""
}

// runE is a command's RunE: fill the options from the command line, then
// run them, or hand them to runF instead (a test's seam).
func runE[T any](opts *T, fill func(c *cobra.Command, args []string) error, runF, run func(*T) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		if err := fill(c, args); err != nil {
			return err
		}
		if runF != nil {
			return runF(opts)
		}
		return run(opts)
	}
}
