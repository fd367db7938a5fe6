package cmd

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// TuneOptions is what `retrygate tune` runs with.
type TuneOptions struct {
	IO        *IOStreams
	Files     []string
	JSON      bool
	SkipBad   bool
	Margin    float64
	SlowAfter time.Duration
	Retry     admit.RetryPolicy // the retry rules the held-out replay judges by
}

func newTuneCmd(f *Factory, runF func(*TuneOptions) error) *cobra.Command {
	opts := &TuneOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "tune [LOG...]",
		Short: "Suggest the budget's caps from the log, then test them on the held-out rows",
		Long: `Tune reads the rows NOT marked holdout=true, suggests the budget's caps,
and tests them on the held-out rows.

The caps:

  max_wait       p95 of wait_s over attempts that produced content (ok,
                 or a reset after content) × margin; an error's wait is
                 how long the error took, so error rows are shown beside
                 the suggestion, never read into it
  deadline       p99 of time-to-success × margin (each attempt's delay +
                 elapsed up to and including the kept one; elapsed holds
                 its wait: what the gate charges a job that succeeds)
  token_ceiling  p99 of tokens per job × margin
  max_attempts   p95 of attempts per succeeded job (a count: no margin), at least 1
  max_spend_usd  p99 of USD per job × margin, over jobs whose every sent
                 attempt carries cost_usd

Percentiles are nearest rank, read exactly from the decimals the log
wrote; durations are rounded up to 0.1s, tokens to 100, USD to 0.0001. The suggestion is written to stdout as a policy
snippet (a YAML budget: block) with, on each line, the percentile it read
and how many values it rests on.

Then every held-out row is replayed under the suggestion, and tune says
plainly whether the held-out rows agree, listing each refusal. Caps
tuned until every historical row is admitted are curve-fitting, not ops;
a held-out run the caps were not fitted to is the only evidence they
generalise. With no held-out rows the suggestion is UNVERIFIED, and tune
says so loudly.` +
			exitStatus("a suggestion written, and the held-out rows (if any) agree",
				"the suggestion refuses a held-out attempt: the held-out rows disagree"),
		Example: `  retrygate tune rehearsal.log > budget.yaml
  retrygate tune --margin 1.5 --json logs/*.log`,
		Args: cobra.ArbitraryArgs,
		RunE: runE(opts, func(c *cobra.Command, args []string) error {
			cfg, err := loadConfig(f, c, nil)
			if err != nil {
				return err
			}
			if opts.Margin < 1 || math.IsNaN(opts.Margin) || math.IsInf(opts.Margin, 0) || opts.Margin > 100 {
				return badInput("--margin: must be between 1 and 100, got %g", opts.Margin)
			}
			pol, _, err := cfg.policy()
			if err != nil {
				return err
			}
			opts.Retry, opts.SlowAfter = pol.Retry, pol.Retry.SlowServerAfter
			opts.Files, err = logFiles(cfg, args)
			return err
		}, runF, runTune),
	}
	fl := cmd.Flags()
	fl.BoolVar(&opts.JSON, "json", false, "write JSON")
	fl.BoolVar(&opts.SkipBad, "skip-bad", false, "skip malformed rows (reported on stderr) instead of stopping")
	fl.Float64Var(&opts.Margin, "margin", summary.DefaultMargin, "headroom `factor` over each percentile (at least 1)")
	return cmd
}

func runTune(opts *TuneOptions) error {
	logs := &logSet{io: opts.IO, names: opts.Files}
	defer logs.close()
	sum := summary.New(summary.Options{By: summary.BySeat, SlowAfter: opts.SlowAfter})
	var (
		held      []ledgerfile.Row
		heldFiles []string
	)
	logs.endLog = sum.EndLog
	_, _, err := logs.scan(opts.SkipBad, func(r *ledgerfile.Row, file string) {
		if r.Holdout {
			held, heldFiles = append(held, *r), append(heldFiles, file)
			return
		}
		sum.Add(r, file)
	})
	if err != nil {
		return err
	}
	s := sum.Close()
	tuned, err := summary.Suggest(s, opts.Margin)
	if err != nil {
		return badInput("cannot tune from %s: %v", strings.Join(displayNames(logs), ", "), err)
	}
	ho := summary.ReplayHeldOut(tuned.Budget, opts.Retry, held, heldFiles)
	warnings := tuneWarnings(tuned, ho)
	if opts.JSON {
		// The document carries its warnings.
		if err := printTuneJSON(opts, logs, s, tuned, ho, warnings); err != nil {
			return err
		}
	} else {
		writeTuneYAML(opts.IO, s, tuned, ho)
		for _, w := range warnings { // once, after the suggestions they are about
			fmt.Fprintf(opts.IO.ErrOut, "retrygate: warning: %s\n", w)
		}
	}
	if !ho.Agree() {
		fmt.Fprintf(opts.IO.ErrOut, "retrygate: the suggested budget refuses %d of %d held-out %s: the held-out rows disagree\n",
			len(ho.Refused), ho.Rows, plural(int(ho.Rows), "attempt", "attempts"))
		return refused
	}
	return nil
}

func tuneWarnings(t summary.Tuned, ho summary.HeldOut) []string {
	warnings := []string{}
	few := 0
	for _, l := range t.Lines {
		if l.Warning != "" {
			few++
		}
	}
	if few > 0 {
		warnings = append(warnings, fmt.Sprintf("%d of %d suggestions rest on fewer than %d values: a percentile of so few says little",
			few, len(t.Lines), summary.MinRows))
	}
	if ho.Rows == 0 {
		warnings = append(warnings, "UNVERIFIED: no held-out rows (holdout=true). These caps were fitted to the very rows "+
			"they would be judged on: that is curve-fitting, not evidence. Keep one run out of tuning "+
			"(mark its rows holdout=true) and tune again")
	}
	return warnings
}
