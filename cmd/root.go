// Package cmd is retrygate's command line: it resolves flags, environment
// and config into plain options, calls the domain packages, and renders.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X github.com/retrygate/retrygate/cmd.Version=v1.2.3"
// (the GitHub Action sets it to the ref it was used at); else it comes
// from the module's build info.
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return develVersion
	}
	return buildVersion(bi)
}

// develVersion is a build that knows nothing of where it came from: go
// build without VCS stamping (-buildvcs=false, a source tarball).
const develVersion = "(devel)"

// buildVersion is the version the build info names: the module version
// `go install github.com/retrygate/retrygate@v1.2.3` (or a VCS-stamped go build) records, else
// the commit a go build in a git checkout was made from (+dirty when the
// tree had changes), else (devel).
func buildVersion(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != develVersion {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return develVersion
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	v := develVersion + " " + rev
	if modified == "true" {
		v += "+dirty"
	}
	return v
}

// Factory carries what every command needs from the outside world, so
// tests can replace each piece.
type Factory struct {
	IO         *IOStreams
	Now        func() time.Time
	Getenv     func(string) string
	Environ    func() []string // to find RETRYGATE_ variables that are no setting; nil skips the check
	ConfigFile string          // --config
	Ctx        context.Context // cancelled on Ctrl-C
}

// Main runs retrygate with os.Args and returns the exit code.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	f := &Factory{IO: System(), Now: time.Now, Getenv: os.Getenv, Environ: os.Environ, Ctx: ctx}
	return Run(f, os.Args[1:])
}

// Run executes one command line against f and returns the exit code,
// printing any error once, prefixed "retrygate:".
func Run(f *Factory, args []string) (code int) {
	defer func() {
		// No panic reaches a user as a stack trace: say what happened and
		// where to report it, and exit non-zero.
		if r := recover(); r != nil {
			fmt.Fprintf(f.IO.ErrOut, "retrygate: internal error: %v\nretrygate: hint: this is a bug; please report it with the command line\n", r)
			code = ExitBad
		}
	}()
	if f.Ctx == nil {
		f.Ctx = context.Background()
	}
	root := newRootCmd(f, invoked(args))
	root.SetArgs(args)
	root.SetIn(f.IO.In)
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	err := root.ExecuteContext(f.Ctx)
	f.IO.sayLeftOut()
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintf(f.IO.ErrOut, "retrygate: %v\n", ee.Err)
		}
		if ee.Hint != "" {
			fmt.Fprintf(f.IO.ErrOut, "retrygate: hint: %s\n", ee.Hint)
		}
		return ee.Code
	}
	// Cobra's own errors: unknown command or flag, wrong argument count.
	if uc := unknownCommand(root, err); uc != nil && errors.As(uc, &ee) {
		fmt.Fprintf(f.IO.ErrOut, "retrygate: %v\nretrygate: hint: %s\n", ee.Err, ee.Hint)
		return ee.Code
	}
	fmt.Fprintf(f.IO.ErrOut, "retrygate: %v\n", err)
	if strings.Contains(err.Error(), "unknown command") || strings.Contains(err.Error(), "flag") {
		fmt.Fprintf(f.IO.ErrOut, "retrygate: hint: see 'retrygate --help'\n")
	}
	return ExitBad
}

// NewRootCmd builds the whole command tree.
func NewRootCmd(f *Factory) *cobra.Command { return newRootCmd(f, "") }

// newRootCmd builds the root with every subcommand, or with only the one
// named by only: a shell retry loop runs `admit` and `record` many times a
// second, and building and decorating fifteen command trees it never uses
// was a third of their start-up.
func newRootCmd(f *Factory, only string) *cobra.Command {
	root := &cobra.Command{
		Use:   "retrygate",
		Short: "Rehearse and gate LLM retry policies before they cost you",
		Long: `retrygate rehearses an LLM retry policy on scratch seats, with the gate
(deadline, token ceiling, attempt cap, wait cap) before every attempt,
logs every attempt to rehearsal.log, and gates policy changes in CI.

Where to start:
  retrygate rehearse              the built-in demo: no key, no network
  retrygate time --seat NAME      one call to a seat described in retrygate.yaml
  retrygate rehearse --jobs 20    20 jobs under the policy, every attempt logged
  retrygate report                what the log says: percentiles, retry tax, timeouts
  retrygate check --policy FILE   the CI gate: exit 1 when the logs break the policy
The words (seat, job, attempt, budget, wait, ttfb, elapsed, gen) are in
docs/concepts.md.

Settings resolve as flags > environment (RETRYGATE_<SECTION>_<KEY>, e.g.
RETRYGATE_BUDGET_DEADLINE=45s) > config file (retrygate.yaml, or --config)
> defaults. Durations take Go syntax (45s, 1m30s, 1500ms) or bare seconds.` +
			exitStatus("done: admit, pass", "refuse, or a CI threshold failed"),
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("retrygate {{.Version}}\n")
	root.SetHelpTemplate(helpTemplate)
	root.AddGroup(commandGroups...)
	root.PersistentFlags().StringVar(&f.ConfigFile, "config", "", "config `file` (default ./retrygate.yaml when present)")
	root.PersistentFlags().BoolVar(&f.IO.Wide, "wide", false, "on a terminal, print every column of a table, however wide (piped output always has them all)")
	root.SetFlagErrorFunc(flagError)
	root.DisableSuggestions = true // unknownCommand suggests, as flags and config keys do
	// An explicit --config is checked here, once, for every command: an
	// empty one ("$CFG" unset) or a typo must not fall back to
	// ./retrygate.yaml or the defaults, and commands that read no config
	// (cost, seat serve) must not ignore it silently.
	root.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		if !c.Flags().Changed("config") {
			return nil
		}
		if strings.TrimSpace(f.ConfigFile) == "" {
			return badInput("--config: empty path")
		}
		if err := checkInputFile(f.ConfigFile, maxConfigBytes); err != nil {
			return badInput("--config %q: %v", f.ConfigFile, err)
		}
		return nil
	}
	addCommands(root, f, only)
	// A run of one subcommand never completes: shell completion comes
	// through cobra's __complete, which builds the whole tree (only is
	// ""). So the completion command and every flag's completion function
	// are made only then: in a shell loop's `admit` they were a fifth of
	// the command's own start-up.
	root.CompletionOptions.DisableDefaultCmd = only != ""
	// Cobra's own completion and help commands get the same EXIT STATUS
	// section as every other command.
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" || c.Name() == "help" {
			withExitStatus(c)
		}
	}
	decorateFlags(root, f, only == "")
	guardGroups(root)
	return root
}

func withExitStatus(c *cobra.Command) {
	if !strings.Contains(c.Long, "EXIT STATUS") {
		long := c.Long
		if long == "" {
			long = c.Short
		}
		c.Long = long + exitStatus("done", "not used")
	}
	for _, sub := range c.Commands() {
		withExitStatus(sub)
	}
}
