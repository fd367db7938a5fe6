package cmd

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"retrygate/ledgerfile"
	"retrygate/ledgerfile/summary"
)

// TuneOptions is what `retrygate tune` runs with.
type TuneOptions struct {
	IO        *IOStreams
	Files     []string
	JSON      bool
	SkipBad   bool
	Margin    float64
	SlowAfter time.Duration
}

func newTuneCmd(f *Factory, runF func(*TuneOptions) error) *cobra.Command {
	opts := &TuneOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "tune [LOG...]",
		Short: "Suggest the budget's caps from the log, then test them on the held-out rows",
		Long: `Tune reads the rows NOT marked holdout=true and suggests the budget:

  max_wait       p95 of wait_s over sent attempts × margin
  deadline       p99 of time-to-success × margin (earlier attempts' delay
                 + elapsed, then the kept attempt's wait + elapsed: what
                 the gate charges a job that succeeds)
  token_ceiling  p99 of tokens per job × margin
  max_attempts   p95 of attempts per succeeded job (a count: no margin), at least 1
  max_spend_usd  p99 of USD per job × margin, over jobs whose every sent
                 attempt carries cost_usd

Percentiles are nearest rank; durations are rounded up to 0.1s, tokens to
100, USD to 0.0001. The suggestion is written to stdout as a policy
snippet (a YAML budget: block) with, on each line, the percentile it read
and how many values it rests on.

Then every held-out row is replayed under the suggestion, and tune says
plainly whether the held-out rows agree, listing each refusal. Seed 003:
caps tuned until every historical row is admitted are curve-fitting, not
ops; a held-out run the caps were not fitted to is the only evidence they
generalise. With no held-out rows the suggestion is UNVERIFIED, and tune
says so loudly.` +
			exitStatus("a suggestion written, and the held-out rows (if any) agree",
				"the suggestion refuses a held-out attempt: the held-out rows disagree"),
		Example: `  retrygate tune rehearsal.log > budget.yaml
  retrygate tune --margin 1.5 --json logs/*.log`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			cfg, err := loadConfig(f, c, nil)
			if err != nil {
				return err
			}
			if opts.Margin < 1 || math.IsNaN(opts.Margin) || math.IsInf(opts.Margin, 0) || opts.Margin > 100 {
				return badInput("--margin: must be between 1 and 100, got %g", opts.Margin)
			}
			if opts.SlowAfter, err = cfg.duration("retry.slow_5xx_after"); err != nil {
				return err
			}
			if opts.Files, err = logFiles(cfg, args); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runTune(opts)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&opts.JSON, "json", false, "write JSON")
	fl.BoolVar(&opts.SkipBad, "skip-bad", false, "skip malformed rows (reported on stderr) instead of stopping")
	fl.Float64Var(&opts.Margin, "margin", summary.DefaultMargin, "headroom `factor` over each percentile (at least 1)")
	return cmd
}

type heldOutJSON struct {
	Rows     int64              `json:"rows"`
	Verified bool               `json:"verified"`
	Agree    bool               `json:"agree"`
	Refused  []summary.Replayed `json:"refused"`
}

type tuneJSON struct {
	Logs        []string             `json:"logs"`
	Rows        int64                `json:"rows"`
	Attempts    int64                `json:"attempts"`
	Jobs        int64                `json:"jobs"`
	Margin      float64              `json:"margin"`
	Suggestions []summary.Suggestion `json:"suggestions"`
	Budget      budgetJSON           `json:"budget"`
	HeldOut     heldOutJSON          `json:"held_out"`
	Warnings    []string             `json:"warnings"`
}

type heldRow struct {
	row  ledgerfile.Row
	file string
}

func runTune(opts *TuneOptions) error {
	logs := &logSet{io: opts.IO, names: opts.Files}
	defer logs.close()
	sum := summary.New(summary.Options{By: summary.BySeat, SlowAfter: opts.SlowAfter})
	var held []heldRow
	_, _, err := logs.scan(opts.SkipBad, func(r *ledgerfile.Row, file string) {
		if r.Holdout {
			held = append(held, heldRow{*r, file})
			return
		}
		sum.Add(r, file)
	})
	if err != nil {
		return err
	}
	s := sum.Summary()
	tuned, err := summary.Suggest(s, opts.Margin)
	if err != nil {
		return badInput("cannot tune from %s: %v", strings.Join(displayNames(logs), ", "), err)
	}
	rp := summary.NewReplayer(tuned.Budget)
	var refusedHeld []summary.Replayed
	for i := range held {
		if res := rp.Add(&held[i].row, held[i].file); res.Refused() {
			refusedHeld = append(refusedHeld, res)
		}
	}
	verified := len(held) > 0
	agree := len(refusedHeld) == 0

	var warnings []string
	few := 0
	for _, l := range tuned.Lines {
		if l.Warning != "" {
			few++
		}
	}
	if few > 0 {
		warnings = append(warnings, fmt.Sprintf("%d of %d suggestions rest on fewer than %d values: a percentile of so few says little",
			few, len(tuned.Lines), summary.MinRows))
	}
	if !verified {
		warnings = append(warnings, "UNVERIFIED: no held-out rows (holdout=true). These caps were fitted to the very rows "+
			"they would be judged on: that is curve-fitting, not evidence (seed 003). Keep one run out of tuning "+
			"(mark its rows holdout=true) and tune again")
	}
	for _, w := range warnings {
		fmt.Fprintf(opts.IO.ErrOut, "retrygate: warning: %s\n", w)
	}

	if opts.JSON {
		out := tuneJSON{
			Logs: displayNames(logs), Rows: s.Rows, Attempts: s.All.Attempts, Jobs: s.All.Jobs, Margin: opts.Margin,
			Suggestions: tuned.Lines, Budget: toBudgetJSON(tuned.Budget),
			HeldOut:  heldOutJSON{Rows: int64(len(held)), Verified: verified, Agree: agree, Refused: refusedHeld},
			Warnings: warnings,
		}
		if out.HeldOut.Refused == nil {
			out.HeldOut.Refused = []summary.Replayed{}
		}
		if out.Warnings == nil {
			out.Warnings = []string{}
		}
		if err := printJSON(opts.IO.Out, out); err != nil {
			return err
		}
	} else {
		writeTuneYAML(opts.IO, s, tuned, held, refusedHeld)
	}
	if !agree {
		fmt.Fprintf(opts.IO.ErrOut, "retrygate: the suggested budget refuses %d of %d held-out %s: the held-out rows disagree\n",
			len(refusedHeld), len(held), plural(len(held), "attempt", "attempts"))
		return refused
	}
	return nil
}

func writeTuneYAML(s *IOStreams, sum *summary.Summary, t summary.Tuned, held []heldRow, refusedHeld []summary.Replayed) {
	w := s.Out
	fmt.Fprintf(w, "# retrygate tune: from the %d %s not held out (%d sent %s, %d %s).\n",
		sum.Rows, plural(int(sum.Rows), "row", "rows"), sum.All.Attempts, plural(int(sum.All.Attempts), "attempt", "attempts"),
		sum.All.Jobs, plural(int(sum.All.Jobs), "job", "jobs"))
	fmt.Fprintf(w, "# Each cap is a nearest-rank percentile × %g, rounded up; the attempt cap is a count.\n", t.Margin)
	fmt.Fprintln(w, "budget:")
	width := 0
	vals := make([]string, len(t.Lines))
	for i, l := range t.Lines {
		vals[i] = yamlValue(l)
		width = max(width, len(l.Key)+len(vals[i]))
	}
	for i, l := range t.Lines {
		note := fmt.Sprintf("%s; %d %s", l.Basis, l.Rows, plural(int(l.Rows), "value", "values"))
		if l.Warning != "" {
			note += fmt.Sprintf(" (fewer than %d)", summary.MinRows)
		}
		fmt.Fprintf(w, "  %s: %s%s  # %s\n", l.Key, vals[i], strings.Repeat(" ", width-len(l.Key)-len(vals[i])), note)
	}
	switch {
	case len(held) == 0:
		fmt.Fprintln(w, "# UNVERIFIED: no held-out rows. These caps fit the rows they came from, and nothing")
		fmt.Fprintln(w, "# has tested them on a run they were not fitted to (seed 003: curve-fitting).")
	case len(refusedHeld) == 0:
		what := fmt.Sprintf("all %d held-out rows", len(held))
		if len(held) == 1 {
			what = "the 1 held-out row"
		}
		fmt.Fprintf(w, "# Held-out check: the suggested budget admits %s. The held-out rows agree.\n", what)
	default:
		fmt.Fprintf(w, "# Held-out check: the suggested budget REFUSES %d of %d held-out %s. The held-out rows DO NOT agree.\n",
			len(refusedHeld), len(held), plural(len(held), "row", "rows"))
		for _, r := range refusedHeld {
			now := r.Now
			if len(r.Also) > 0 {
				now += " (also: " + strings.Join(r.Also, ", ") + ")"
			}
			attempt := "-"
			if r.Attempt > 0 {
				attempt = strconv.Itoa(r.Attempt)
			}
			fmt.Fprintf(w, "#   %s:%d job=%s attempt=%s  %s  wait_s=%.3f elapsed_s=%.3f tokens=%d spent_s=%.3f spent_tokens=%d used=%d\n",
				r.File, r.Line, orDash(r.Job), attempt, now, r.WaitS, r.ElapsedS, r.Tokens, r.SpentS, r.SpentTokens, r.Used)
		}
		fmt.Fprintln(w, "# Believe the refusal (seed 003): explain it in one sentence, raise the cap in public,")
		fmt.Fprintln(w, "# or shrink the job; do not widen the caps until the held-out run passes.")
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// yamlValue writes a suggestion as the config file takes it: durations
// in Go syntax, counts whole, USD plain.
func yamlValue(l summary.Suggestion) string {
	switch l.Key {
	case "max_wait", "deadline":
		return strconv.FormatFloat(l.Value, 'f', -1, 64) + "s"
	case "max_spend_usd":
		return strconv.FormatFloat(l.Value, 'f', -1, 64)
	}
	return strconv.FormatInt(int64(l.Value), 10)
}
