package cmd

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"retrygate/admit"
	"retrygate/ledgerfile"
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
}

// CheckThreshold is one parsed threshold and where the policy wrote it.
type CheckThreshold struct {
	admit.Threshold
	Where string
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
    unknown_rate: ["count == 0"]
    deadline_miss_rate: ["rate < 5%"]
    billable_failure_rate: ["rate < 50%"]

An unknown metric, aggregation, operator or unit is exit 2, naming it:
a typo never passes silently.

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
			if opts.SlowAfter, err = cfg.duration("retry.slow_5xx_after"); err != nil {
				return err
			}
			entries, err := cfg.thresholds()
			if err != nil {
				return err
			}
			opts.Thresholds = nil
			for _, e := range entries {
				for _, expr := range e.Exprs {
					t, err := admit.ParseThreshold(e.Metric, expr)
					if err != nil {
						return badInput("%s: %v", e.Where, err)
					}
					opts.Thresholds = append(opts.Thresholds, CheckThreshold{Threshold: t, Where: e.Where})
				}
			}
			if opts.Files, err = logFiles(cfg, args); err != nil {
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
	fl.BoolVar(&opts.SkipBad, "skip-bad", false, "skip malformed rows (reported on stderr) instead of stopping")
	return cmd
}

type thresholdResult struct {
	Metric      string   `json:"metric"`
	Threshold   string   `json:"threshold"`
	Aggregation string   `json:"aggregation"`
	Observed    *float64 `json:"observed"` // null when there was nothing to measure
	Limit       float64  `json:"limit"`
	Op          string   `json:"op"`
	N           int64    `json:"n"` // values or population the figure rests on
	Pass        bool     `json:"pass"`
	Where       string   `json:"where"`
	Note        string   `json:"note,omitempty"`

	display string
}

type budgetJSON struct {
	DeadlineS    float64 `json:"deadline_s"`
	TokenCeiling int64   `json:"token_ceiling"`
	MaxAttempts  int     `json:"max_attempts"`
	MaxWaitS     float64 `json:"max_wait_s"`
	MaxSpendUSD  float64 `json:"max_spend_usd"`
}

func toBudgetJSON(b admit.Budget) budgetJSON {
	return budgetJSON{b.Deadline.Seconds(), b.TokenCeiling, b.MaxAttempts, b.MaxWait.Seconds(), b.MaxSpendUSD}
}

type checkJSON struct {
	Pass           bool               `json:"pass"`
	Policy         string             `json:"policy"`
	Budget         budgetJSON         `json:"budget"`
	Logs           []string           `json:"logs"`
	Rows           int64              `json:"rows"`
	Jobs           int64              `json:"jobs"`
	HeldOutRows    int64              `json:"held_out_rows"`
	Thresholds     []thresholdResult  `json:"thresholds"`
	Failed         int                `json:"thresholds_failed"`
	ChangesTotal   int64              `json:"changes_total"`
	Changes        []summary.Replayed `json:"changes"`
	HeldOutRefused []summary.Replayed `json:"held_out_refused"`
	Torn           []string           `json:"torn"`
	Skipped        []string           `json:"skipped"`
}

func runCheck(opts *CheckOptions) error {
	logs := &logSet{io: opts.IO, names: opts.Files}
	defer logs.close()
	sum := summary.New(summary.Options{By: summary.BySeat, SlowAfter: opts.SlowAfter})
	rp := summary.NewReplayer(opts.Budget)
	var (
		changes            []summary.Replayed
		changesTotal       int64
		heldRows           int64
		heldRefused        []summary.Replayed
		judged, refusedNow int64
		missed             = map[string]bool{} // jobs the policy stops for its deadline
	)
	torn, skipped, err := logs.scan(opts.SkipBad, func(r *ledgerfile.Row, file string) {
		res := rp.Add(r, file)
		if res.Changed() {
			changesTotal++
			if len(changes) < maxListedChanges {
				changes = append(changes, res)
			}
		}
		if r.Holdout {
			heldRows++
			if res.Refused() {
				heldRefused = append(heldRefused, res)
			}
			return
		}
		judged++
		if res.Refused() {
			refusedNow++
		}
		if missesDeadline(r, res, opts.Budget) {
			key := r.Job
			if key == "" {
				key = fmt.Sprintf("%s:%d", file, r.Line) // a jobless row is a job of its own
			}
			missed[key] = true
		}
		sum.Add(r, file)
	})
	if err != nil {
		return err
	}
	s := sum.Summary()
	results := evalThresholds(opts.Thresholds, s, refusedNow, judged, int64(len(missed)))
	failed := 0
	for _, r := range results {
		if !r.Pass {
			failed++
		}
	}
	pass := failed == 0 && len(heldRefused) == 0
	if len(opts.Thresholds) == 0 {
		fmt.Fprintf(opts.IO.ErrOut, "retrygate: warning: %s has no thresholds: check judges only the held-out rows\n", opts.Policy)
	}
	if heldRows == 0 {
		fmt.Fprintf(opts.IO.ErrOut, "retrygate: warning: no held-out rows (holdout=true): nothing checks the budget against a run it was not tuned on (seed 003)\n")
	}

	if opts.JSON {
		out := checkJSON{
			Pass: pass, Policy: opts.Policy, Budget: toBudgetJSON(opts.Budget), Logs: displayNames(logs),
			Rows: judged, Jobs: s.All.Jobs, HeldOutRows: heldRows, Thresholds: results, Failed: failed,
			ChangesTotal: changesTotal, Changes: changes, HeldOutRefused: heldRefused,
			Torn: lineRefs(torn), Skipped: lineRefs(skipped),
		}
		if out.Thresholds == nil {
			out.Thresholds = []thresholdResult{}
		}
		if out.Changes == nil {
			out.Changes = []summary.Replayed{}
		}
		if out.HeldOutRefused == nil {
			out.HeldOutRefused = []summary.Replayed{}
		}
		if err := printJSON(opts.IO.Out, out); err != nil {
			return err
		}
		if !pass {
			return refused
		}
		return nil
	}

	w := opts.IO.Out
	fmt.Fprintf(w, "policy %s: %s\n", opts.Policy, budgetLine(opts.Budget))
	fmt.Fprintf(w, "judged %d %s in %d %s; %d held-out %s judged apart\n",
		judged, plural(int(judged), "row", "rows"), s.All.Jobs, plural(int(s.All.Jobs), "job", "jobs"),
		heldRows, plural(int(heldRows), "row", "rows"))
	if len(results) > 0 {
		fmt.Fprintln(w)
		rows := make([][]string, 0, len(results))
		for _, r := range results {
			mark := "pass"
			if !r.Pass {
				mark = "fail"
			}
			if opts.IO.OutTTY {
				mark = map[bool]string{true: "✓ pass", false: "✗ fail"}[r.Pass]
			}
			obs := r.display
			if r.Note != "" {
				obs += " (" + r.Note + ")"
			}
			rows = append(rows, []string{mark, r.Metric, r.Threshold, obs, r.Where})
		}
		if err := printTable(opts.IO, []string{"result", "metric", "threshold", "observed", "where"}, rows); err != nil {
			return err
		}
	}

	fmt.Fprintf(w, "\ndecisions that change under this budget: %d of %d rows\n", changesTotal, judged+heldRows)
	if len(changes) > 0 {
		if err := printTable(opts.IO, replayHeader(), replayRows(changes, 50)); err != nil {
			return err
		}
		if len(changes) > 50 {
			fmt.Fprintf(w, "… and %d more (--json lists up to %d)\n", changesTotal-50, maxListedChanges)
		}
	}

	switch {
	case heldRows == 0:
		fmt.Fprintf(w, "\nheld-out rows: none\n")
	case len(heldRefused) == 0:
		fmt.Fprintf(w, "\nheld-out rows: %d, every one admitted by this budget\n", heldRows)
	default:
		fmt.Fprintf(w, "\nheld-out rows: the budget REFUSES %d of %d; believe the refusal (seed 003):\n", len(heldRefused), heldRows)
		if err := printTable(opts.IO, replayHeader(), replayRows(heldRefused, len(heldRefused))); err != nil {
			return err
		}
	}

	verdict := fmt.Sprintf("%d of %d thresholds failed", failed, len(results))
	if failed == 0 {
		verdict = fmt.Sprintf("%d %s passed", len(results), plural(len(results), "threshold", "thresholds"))
	}
	if len(heldRefused) > 0 {
		verdict += fmt.Sprintf("; %d held-out %s refused", len(heldRefused), plural(len(heldRefused), "attempt", "attempts"))
	}
	if pass {
		fmt.Fprintf(w, "\ncheck: PASS (%s)\n", verdict)
		return nil
	}
	fmt.Fprintf(w, "\ncheck: FAIL (%s)\n", verdict)
	return refused
}

func budgetLine(b admit.Budget) string {
	s := fmt.Sprintf("deadline %s, token_ceiling %d, max_attempts %d, max_wait %s",
		b.Deadline, b.TokenCeiling, b.MaxAttempts, b.MaxWait)
	if b.HasSpendCeiling() {
		s += fmt.Sprintf(", max_spend_usd %g", b.MaxSpendUSD)
	}
	return s
}

func replayHeader() []string {
	return []string{"row", "job", "attempt", "seat", "logged", "now", "wait_s", "elapsed_s", "tokens", "spent_s", "spent_tokens", "used"}
}

func replayRows(rs []summary.Replayed, limit int) [][]string {
	var rows [][]string
	for i, r := range rs {
		if i == limit {
			break
		}
		now := r.Now
		if len(r.Also) > 0 {
			now += " (also: " + strings.Join(r.Also, ", ") + ")"
		}
		attempt := "-"
		if r.Attempt > 0 {
			attempt = strconv.Itoa(r.Attempt)
		}
		job := r.Job
		if job == "" {
			job = "-"
		}
		seat := r.Seat
		if seat == "" {
			seat = "-"
		}
		rows = append(rows, []string{fmt.Sprintf("%s:%d", r.File, r.Line), job, attempt, seat, r.Logged, now,
			strconv.FormatFloat(r.WaitS, 'f', 3, 64), strconv.FormatFloat(r.ElapsedS, 'f', 3, 64),
			strconv.FormatInt(r.Tokens, 10), strconv.FormatFloat(r.SpentS, 'f', 3, 64),
			strconv.FormatInt(r.SpentTokens, 10), strconv.Itoa(r.Used)})
	}
	return rows
}

// observedFor gathers what a metric measured over the judged rows.
func observedFor(metric string, s *summary.Summary, refusedNow, judged, missed int64) (admit.Observed, int64) {
	all := s.All
	switch metric {
	case "wait_s":
		return admit.Observed{Values: all.Wait.Values}, int64(all.Wait.N)
	case "ttfb_s":
		return admit.Observed{Values: all.TTFB.Values}, int64(all.TTFB.N)
	case "elapsed_s":
		return admit.Observed{Values: all.Elapsed.Values}, int64(all.Elapsed.N)
	case "tokens":
		return admit.Observed{Values: all.Tokens.Values}, int64(all.Tokens.N)
	case "attempts_per_success":
		return admit.Observed{Value: float64(all.AttemptsPerSuccess)}, all.Succeeded
	case "retry_ratio":
		return admit.Observed{Value: float64(all.RetryRatio)}, all.Jobs
	case "retry_tax":
		return admit.Observed{Value: float64(all.RetryTax.TokensShare)}, all.Attempts
	case "refused_rate":
		return admit.Observed{Num: refusedNow, Den: judged}, judged
	case "unknown_rate":
		return admit.Observed{Num: all.Unknown, Den: all.Jobs}, all.Jobs
	case "deadline_miss_rate":
		return admit.Observed{Num: missed, Den: s.Jobs.Jobs}, s.Jobs.Jobs
	case "billable_failure_rate":
		return admit.Observed{Num: all.BilledFailures, Den: all.FailedAttempts}, all.FailedAttempts
	}
	return admit.Observed{Value: math.NaN()}, 0
}

func evalThresholds(ts []CheckThreshold, s *summary.Summary, refusedNow, judged, missed int64) []thresholdResult {
	var out []thresholdResult
	for _, t := range ts {
		o, n := observedFor(t.Metric, s, refusedNow, judged, missed)
		v, pass := t.Eval(o)
		r := thresholdResult{Metric: t.Metric, Threshold: t.String(), Aggregation: t.Label(), Limit: t.Value, Op: t.Op,
			N: n, Pass: pass, Where: t.Where}
		if t.Agg == admit.AggCount {
			r.N = int64(v)
		}
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			vv := v
			r.Observed = &vv
		}
		switch {
		case math.IsNaN(v):
			r.Note = "no data: nothing to measure, so it cannot pass"
		case math.IsInf(v, 1):
			r.Note = "no job succeeded"
		}
		r.display = t.Label() + "=" + formatObserved(t.Threshold, v)
		out = append(out, r)
	}
	return out
}

// formatObserved writes an observed figure in the threshold's own terms.
func formatObserved(t admit.Threshold, v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "∞"
	}
	spec, _ := admit.LookupMetric(t.Metric)
	switch {
	case t.Agg == admit.AggCount:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case spec.Time:
		return strconv.FormatFloat(v, 'f', 3, 64) + "s"
	case spec.Percent && t.Unit == "%":
		return strconv.FormatFloat(v*100, 'f', 1, 64) + "%"
	case spec.Percent:
		return strconv.FormatFloat(v, 'f', 4, 64)
	case v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// missesDeadline says whether a row shows its job stopped by the deadline
// under the policy being checked — the definition simulate uses too: the
// replayed gate refuses the attempt for the deadline, or the attempt was
// a timeout cut at the end of what was left of the deadline.
func missesDeadline(r *ledgerfile.Row, res summary.Replayed, b admit.Budget) bool {
	if res.Now == admit.Refuse(admit.ReasonDeadline).String() {
		return true
	}
	return r.WasSent() && r.Outcome == admit.Timeout && res.Spent.Time+r.Elapsed >= b.Deadline
}
