package cmd

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse"
)

// CheckOptions is what `retrygate check` runs with.
type CheckOptions struct {
	IO        *IOStreams
	Policy    string // the policy file the budget and thresholds came from
	Files     []string
	JSON      bool
	Format    string // table, tsv, json, github or junit; "" is table on a terminal, tsv piped
	JUnitFile string // also write the JUnit report here
	Workspace string // GITHUB_WORKSPACE: annotations name files relative to it
	SkipBad   bool
	Budget    admit.Budget
	// Windows are the policy's seats' context windows, for the replay of
	// a context-length retry.
	Windows    map[string]int64
	Thresholds []summary.Threshold
	// ThresholdLines is the policy line of each threshold (0 when unknown),
	// for annotations and JUnit: filled with Thresholds, one for one.
	ThresholdLines []int
	SlowAfter      time.Duration
	Retry          admit.RetryPolicy // the retry rules the replay judges by
	HTML           string            // check --html: the page (check_html.go)
}

// maxListedChanges bounds the decision changes kept for printing; the
// count is always exact.
const maxListedChanges = 1000

func newCheckCmd(f *Factory, runF func(*CheckOptions) error) *cobra.Command {
	opts := &CheckOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "check --policy FILE [LOG...]",
		Short: "CI gate: fail when the logs break the policy's thresholds or its held-out rows are refused",
		Long: `Check judges rehearsal logs against a policy file: its budget and its
thresholds (k6's grammar: per metric a list of "agg op value").

  thresholds:
    wait_s: ["p(95) < 5s"]            # avg min max med p(N) count; units ms s m (bare = s)
    tokens: ["p(99) <= 8000"]
    attempts_per_success: ["< 1.5"]   # one number: no aggregation (or "value")
    retry_ratio: ["< 1.3"]
    retry_tax: ["< 25%"]              # share of tokens; % or a fraction
    refused_rate: ["rate < 10%"]      # rate or count
    retry_budget_refusals: ["count == 0"]  # retries the retry budget refused
    unknown_rate: ["count == 0"]
    deadline_miss_rate: ["rate < 5%"]
    billable_failure_rate: ["rate < 50%"]

An unknown metric, aggregation, operator or unit is exit 2, naming it:
a typo never passes silently. So is a policy with no thresholds, an
empty list, or a rate limit outside 0%–100%: a gate that checks nothing
fails closed.

Every row is replayed under the policy's budget: its job's spend is
recomputed from the job's earlier rows (spent time = Σ elapsed_s + delay_s
of earlier sent attempts; tokens and USD summed; used = attempts sent),
and the row's own numbers are the next attempt. Rows whose decision flips
(admitted in the log and refused now, or the reverse) are listed.

Rows marked holdout=true are judged apart: they take no part in the
thresholds, and any held-out attempt the budget refuses fails the check
(believe the refusal). Jobs the policy stops for its deadline (a
replayed refuse: deadline, or a timeout cut at the end of what was left
of the deadline) are deadline_miss_rate's misses, as simulate and
rehearse count them. Percentiles are nearest rank.

--format github writes the report, then a GitHub workflow annotation for
each failed threshold (at its line in the policy), each held-out attempt
the budget refuses (error) and each other decision that changes
(warning), both at their line in the log, and a notice with the verdict.
--format junit writes a JUnit XML report: one test case per threshold and
one for the held-out rows. --junit FILE writes that report to FILE as
well, whatever --format is. The exit status is the verdict, so CI needs
no pipe.

On a shadow proxy's log (proxy --shadow: rows with would=), every form
says what enforcing the policy would change: a "shadow log:" section in
the text, shadow in --json, a notice in --format github, shadow.*
properties and system-out in JUnit, a table in --html.` +
			exitStatus("every threshold passed and every held-out attempt is admitted",
				"a threshold failed, or the budget refuses a held-out attempt"),
		Example: `  retrygate check --policy retrygate.yaml rehearsal.log
  retrygate check --policy policy.yaml --json logs/*.log
  retrygate check --policy retrygate.yaml --format github --junit check.xml rehearsal.log`,
		Args: cobra.ArbitraryArgs,
		RunE: runE(opts, func(c *cobra.Command, args []string) error {
			if err := opts.resolveFormat(c.Flags().Changed("format")); err != nil {
				return err
			}
			if c.Flags().Changed("junit") && strings.TrimSpace(opts.JUnitFile) == "" {
				return badInput("--junit: empty file name")
			}
			if err := checkOutPath("--junit", opts.JUnitFile); err != nil {
				return err
			}
			opts.Workspace = f.Getenv("GITHUB_WORKSPACE")
			if opts.Policy != "" {
				if f.ConfigFile != "" && f.ConfigFile != opts.Policy {
					return badInput("--policy %q and --config %q name different files: pass one", opts.Policy, f.ConfigFile)
				}
				// The policy file is the config file: same keys, same errors.
				f.ConfigFile = opts.Policy
			}
			cfg, err := loadConfig(f, c, nil)
			if err != nil {
				return err
			}
			if cfg.file == "" {
				return withHint(badInput("no policy file: pass --policy FILE"), "a policy is a config file with a budget and thresholds")
			}
			opts.Policy = cfg.file
			if opts.Budget, err = cfg.budget(); err != nil {
				return err
			}
			pol, seats, err := cfg.policy()
			if err != nil {
				return err
			}
			opts.Retry, opts.SlowAfter = pol.Retry, pol.Retry.SlowServerAfter
			opts.Windows = rehearse.Windows(seats)
			entries, err := cfg.thresholds()
			if err != nil {
				return err
			}
			opts.Thresholds, opts.ThresholdLines = nil, nil
			for _, e := range entries {
				if len(e.Exprs) == 0 {
					return badInput("%s: an empty list judges nothing: give at least one \"agg op value\"", e.Where)
				}
				for _, expr := range e.Exprs {
					t, err := admit.ParseThreshold(e.Metric, expr)
					if err != nil {
						return badInput("%s: %v", e.Where, err)
					}
					opts.Thresholds = append(opts.Thresholds, summary.Threshold{Threshold: t, Where: e.Where})
					opts.ThresholdLines = append(opts.ThresholdLines, cfg.lines["thresholds."+e.Metric])
				}
			}
			if len(opts.Thresholds) == 0 {
				return withHint(badInput("%s: %v", opts.Policy, summary.ErrNoThresholds),
					`e.g. thresholds: {wait_s: ["p(95) < 5s"], deadline_miss_rate: ["rate < 5%"]}`)
			}
			if opts.Files, err = logFiles(cfg, args); err != nil {
				return err
			}
			return checkHTMLFlag(c, opts.HTML)
		}, runF, runCheck),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Policy, "policy", "", "policy `file` (a config file: budget and thresholds)")
	fl.BoolVar(&opts.JSON, "json", false, "write JSON (the same as --format json)")
	fl.StringVar(&opts.Format, "format", "", "output: github adds workflow annotations, junit is a JUnit XML report (default: table on a terminal, tsv piped)")
	fl.StringVar(&opts.JUnitFile, "junit", "", "also write a JUnit XML report to `file`")
	fl.StringVar(&opts.HTML, "html", "", "also write a page of each threshold's limit over the observed distribution, and the flipped decisions, to `FILE`")
	fl.BoolVar(&opts.SkipBad, "skip-bad", false, "skip malformed rows (reported on stderr) instead of stopping")
	return cmd
}

// checkFormats are --format's values, in help order.
var checkFormats = []string{"table", "tsv", "json", "github", "junit"}

// resolveFormat settles --format and --json into one format and the
// streams the text report is drawn on.
func (opts *CheckOptions) resolveFormat(formatSet bool) error {
	if formatSet && !slices.Contains(checkFormats, opts.Format) {
		e := badInput("--format: unknown format %q (want %s)", opts.Format, strings.Join(checkFormats, ", "))
		if s, ok := admit.Closest(opts.Format, checkFormats); ok {
			return withHint(e, fmt.Sprintf("did you mean --format %s?", s))
		}
		return e
	}
	if opts.JSON {
		if formatSet && opts.Format != "json" {
			return badInput("--json and --format %s ask for two formats: pass one", opts.Format)
		}
		opts.Format = "json"
	}
	if opts.Format == "" {
		return nil
	}
	io := *opts.IO
	// A forced table borders even a pipe; every other format's text is plain.
	io.OutTTY = opts.Format == "table"
	opts.IO = &io
	return nil
}

func runCheck(opts *CheckOptions) error {
	logs := &logSet{io: opts.IO, names: opts.Files}
	defer logs.close()
	chk, err := summary.NewCheck(summary.CheckOptions{
		Budget: opts.Budget, Retry: opts.Retry, Thresholds: opts.Thresholds, SlowAfter: opts.SlowAfter, MaxListed: maxListedChanges,
		Windows: opts.Windows,
	})
	if err != nil {
		return badInput("%s: %v", opts.Policy, err)
	}
	logs.endLog = chk.EndLog
	torn, skipped, err := logs.scan(opts.SkipBad, chk.Add)
	if err != nil {
		return err
	}
	res := chk.Close()
	if res.HeldOut.Rows == 0 {
		fmt.Fprintf(opts.IO.ErrOut, "retrygate: warning: no held-out rows (holdout=true): nothing checks the budget against a run it was not tuned on\n")
	}
	if opts.HTML != "" {
		if err := writeCheckHTML(opts.HTML, opts, res, displayNames(logs)); err != nil {
			return err
		}
	}
	if opts.JUnitFile != "" {
		if err := writeCheckJUnitFile(opts, logs, res); err != nil {
			return err
		}
	}
	switch opts.Format {
	case "json":
		err = printCheckJSON(opts, logs, res, torn, skipped)
	case "github":
		err = printCheckGitHub(opts, res)
	case "junit":
		err = printCheckJUnit(opts.IO.Out, opts, logs, res)
	default:
		err = printCheck(opts, res)
	}
	if err != nil {
		return err
	}
	if !res.Pass {
		return refused
	}
	return nil
}
