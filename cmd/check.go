package cmd

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"retrygate/admit"
	"retrygate/ledgerfile/summary"
)

// CheckOptions is what `retrygate check` runs with.
type CheckOptions struct {
	IO         *IOStreams
	Policy     string // the policy file the budget and thresholds came from
	Files      []string
	JSON       bool
	SkipBad    bool
	Budget     admit.Budget
	Thresholds []CheckThreshold
	SlowAfter  time.Duration
	Retry      admit.RetryPolicy // the retry rules the replay judges by
	HTML       string            // check --html: the page (check_html.go)
}

// CheckThreshold is one parsed threshold and where the policy wrote it.
type CheckThreshold = summary.Threshold

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
(seed 003: believe the refusal). Percentiles are nearest rank.` +
			exitStatus("every threshold passed and every held-out attempt is admitted",
				"a threshold failed, or the budget refuses a held-out attempt"),
		Example: `  retrygate check --policy retrygate.yaml rehearsal.log
  retrygate check --policy policy.yaml --json logs/*.log`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
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
			pol, _, err := cfg.policy()
			if err != nil {
				return err
			}
			opts.Retry, opts.SlowAfter = pol.Retry, pol.Retry.SlowServerAfter
			entries, err := cfg.thresholds()
			if err != nil {
				return err
			}
			opts.Thresholds = nil
			for _, e := range entries {
				if len(e.Exprs) == 0 {
					return badInput("%s: an empty list judges nothing: give at least one \"agg op value\"", e.Where)
				}
				for _, expr := range e.Exprs {
					t, err := admit.ParseThreshold(e.Metric, expr)
					if err != nil {
						return badInput("%s: %v", e.Where, err)
					}
					opts.Thresholds = append(opts.Thresholds, CheckThreshold{Threshold: t, Where: e.Where})
				}
			}
			if len(opts.Thresholds) == 0 {
				return withHint(badInput("%s: %v", opts.Policy, summary.ErrNoThresholds),
					`e.g. thresholds: {wait_s: ["p(95) < 5s"], deadline_miss_rate: ["rate < 5%"]}`)
			}
			if opts.Files, err = logFiles(cfg, args); err != nil {
				return err
			}
			if err := checkHTMLFlag(c, opts.HTML); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runCheck(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Policy, "policy", "", "policy `file` (a config file: budget and thresholds)")
	fl.BoolVar(&opts.JSON, "json", false, "write JSON")
	fl.StringVar(&opts.HTML, "html", "", "also write a page of each threshold's limit over the observed distribution, and the flipped decisions, to `FILE`")
	fl.BoolVar(&opts.SkipBad, "skip-bad", false, "skip malformed rows (reported on stderr) instead of stopping")
	return cmd
}

func runCheck(opts *CheckOptions) error {
	logs := &logSet{io: opts.IO, names: opts.Files}
	defer logs.close()
	chk, err := summary.NewCheck(summary.CheckOptions{
		Budget: opts.Budget, Retry: opts.Retry, Thresholds: opts.Thresholds, SlowAfter: opts.SlowAfter, MaxListed: maxListedChanges,
	})
	if err != nil {
		return badInput("%s: %v", opts.Policy, err)
	}
	torn, skipped, err := logs.scan(opts.SkipBad, chk.Add)
	if err != nil {
		return err
	}
	res := chk.Close()
	if res.HeldOut.Rows == 0 {
		fmt.Fprintf(opts.IO.ErrOut, "retrygate: warning: no held-out rows (holdout=true): nothing checks the budget against a run it was not tuned on (seed 003)\n")
	}
	if opts.HTML != "" {
		if err := writeCheckHTML(opts.HTML, opts, res, displayNames(logs)); err != nil {
			return err
		}
	}
	if opts.JSON {
		err = printCheckJSON(opts, logs, res, torn, skipped)
	} else {
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
