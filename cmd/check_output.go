package cmd

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

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
	Pass           bool                      `json:"pass"`
	Policy         string                    `json:"policy"`
	Budget         budgetJSON                `json:"budget"`
	Logs           []string                  `json:"logs"`
	Rows           int64                     `json:"rows"`
	Jobs           int64                     `json:"jobs"`
	HeldOutRows    int64                     `json:"held_out_rows"`
	Thresholds     []summary.ThresholdResult `json:"thresholds"`
	Failed         int                       `json:"thresholds_failed"`
	ChangesTotal   int64                     `json:"changes_total"`
	Changes        []summary.Replayed        `json:"changes"`
	HeldOutRefused []summary.Replayed        `json:"held_out_refused"`
	Goodput        summary.Goodput           `json:"goodput"`          // jobs meeting every threshold, per second (docs/load.md)
	Shadow         *summary.Shadow           `json:"shadow,omitempty"` // a shadow proxy's log: what enforcing would change
	Torn           []string                  `json:"torn"`
	Skipped        []string                  `json:"skipped"`
}

func printCheckJSON(opts *CheckOptions, logs *logSet, res *summary.CheckResult, torn, skipped []*ledgerfile.LineError) error {
	return printJSON(opts.IO.Out, checkJSON{
		Pass: res.Pass, Policy: opts.Policy, Budget: toBudgetJSON(opts.Budget), Logs: displayNames(logs),
		Rows: res.Judged, Jobs: res.Summary.All.Jobs, HeldOutRows: res.HeldOut.Rows, Thresholds: res.Thresholds, Goodput: res.Goodput,
		Failed: res.Failed, ChangesTotal: res.ChangesTotal, Changes: res.Changes, HeldOutRefused: res.HeldOut.Refused,
		Torn: lineRefs(torn), Skipped: lineRefs(skipped), Shadow: res.Shadow,
	})
}

func printCheck(opts *CheckOptions, res *summary.CheckResult) error {
	w := opts.IO.Out
	judged, held, jobs := res.Judged, res.HeldOut.Rows, res.Summary.All.Jobs
	heldRefused := res.HeldOut.Refused
	fmt.Fprintln(w, opts.IO.fit(fmt.Sprintf("policy %s: %s", opts.Policy, budgetLine(opts.Budget))))
	fmt.Fprintf(w, "judged %d %s in %d %s; %d held-out %s judged apart\n",
		judged, plural(int(judged), "row", "rows"), jobs, plural(int(jobs), "job", "jobs"),
		held, plural(int(held), "row", "rows"))
	if len(res.Thresholds) > 0 {
		fmt.Fprintln(w)
		rows := make([][]string, 0, len(res.Thresholds))
		for _, r := range res.Thresholds {
			mark := strings.ToLower(passFail[r.Pass])
			if opts.IO.OutTTY {
				mark = map[bool]string{true: "✓ ", false: "✗ "}[r.Pass] + mark
			}
			obs := r.Aggregation + "=" + formatObserved(r.Spec, r.Value)
			if r.Note != "" {
				obs += " (" + r.Note + ")"
			}
			rows = append(rows, []string{mark, r.Metric, r.Threshold, obs, r.Where})
		}
		if err := printTable(opts.IO, []string{"result", "metric", "threshold", "observed", "where"}, rows, "where"); err != nil {
			return err
		}
	}

	fmt.Fprintf(w, "\ndecisions that change under this budget: %d of %d rows\n", res.ChangesTotal, judged+held)
	if len(res.Changes) > 0 {
		if err := printTable(opts.IO, replayHeader(), replayRows(res.Changes, 50), replayNarrow...); err != nil {
			return err
		}
		if len(res.Changes) > 50 {
			fmt.Fprintf(w, "… and %d more (--json lists up to %d)\n", res.ChangesTotal-50, maxListedChanges)
		}
	}

	if res.Shadow != nil {
		printShadow(w, res.Shadow, opts.Budget.Deadline)
	}

	switch {
	case held == 0:
		fmt.Fprintf(w, "\nheld-out rows: none\n")
	case len(heldRefused) == 0:
		fmt.Fprintf(w, "\nheld-out rows: %d, every one admitted by this budget\n", held)
	default:
		fmt.Fprintf(w, "\nheld-out rows: the budget REFUSES %d of %d; believe the refusal:\n", len(heldRefused), held)
		if err := printTable(opts.IO, replayHeader(), replayRows(heldRefused, len(heldRefused)), replayNarrow...); err != nil {
			return err
		}
	}

	fmt.Fprintf(w, "\ncheck: %s (%s)\n", passFail[res.Pass], verdictCounts(res))
	return nil
}

var passFail = map[bool]string{true: "PASS", false: "FAIL"}

// verdictCounts is what the verdict rests on, in every format's words:
// "3 of 5 thresholds failed; 1 held-out attempt refused".
func verdictCounts(res *summary.CheckResult) string {
	n := len(res.Thresholds)
	s := fmt.Sprintf("%d of %d thresholds failed", res.Failed, n)
	if res.Failed == 0 {
		s = fmt.Sprintf("%d %s passed", n, plural(n, "threshold", "thresholds"))
	}
	if k := len(res.HeldOut.Refused); k > 0 {
		s += fmt.Sprintf("; %d held-out %s refused", k, plural(k, "attempt", "attempts"))
	}
	return s
}

func budgetLine(b admit.Budget) string {
	s := fmt.Sprintf("deadline %s, token_ceiling %d, max_attempts %d, max_wait %s",
		b.Deadline, b.TokenCeiling, b.MaxAttempts, b.MaxWait)
	if b.HasSpendCeiling() {
		s += fmt.Sprintf(", max_spend_usd %g", b.MaxSpendUSD)
	}
	return s
}

// replayHeader names what each column is: row_wait_s, row_elapsed_s and
// row_tokens are the row's own observed numbers (not the estimate the gate
// judged the attempt on, which comes from the job's earlier rows);
// spent_s, spent_tokens and used are the gate's inputs, the job's spend
// before the row, recomputed from those earlier rows.
// replayNarrow is what a narrow terminal leaves out of a replayed row,
// first to last: the logged and the new decision stay, with the job and
// the row's times.
var replayNarrow = []string{"used", "spent_tokens", "row_tokens", "seat", "row", "spent_s"}

func replayHeader() []string {
	return []string{"row", "job", "attempt", "seat", "logged", "now", "row_wait_s", "row_elapsed_s", "row_tokens", "spent_s", "spent_tokens", "used"}
}

func replayRows(rs []summary.Replayed, limit int) [][]string {
	var rows [][]string
	for i, r := range rs {
		if i == limit {
			break
		}
		attempt := "-"
		if r.Attempt > 0 {
			attempt = strconv.Itoa(r.Attempt)
		}
		rows = append(rows, []string{fmt.Sprintf("%s:%d", r.File, r.Line), orDash(r.Job), attempt, orDash(r.Seat), r.Logged, replayedNow(r),
			summary.SecondsText(r.WaitS), summary.SecondsText(r.ElapsedS),
			strconv.FormatInt(r.Tokens, 10), summary.SecondsText(r.SpentS),
			strconv.FormatInt(r.SpentTokens, 10), strconv.Itoa(r.Used)})
	}
	return rows
}

// replayedNow is a replayed decision with every other failing check.
func replayedNow(r summary.Replayed) string {
	if len(r.Also) == 0 {
		return r.Now
	}
	return r.Now + " (also: " + strings.Join(r.Also, ", ") + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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
		return summary.SecondsText(v) + "s"
	case spec.Percent && t.Unit == "%":
		return strconv.FormatFloat(v*100, 'f', 1, 64) + "%"
	case spec.Percent:
		return strconv.FormatFloat(v, 'f', 4, 64)
	case v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// printShadow writes a shadow log's section of the text report.
func printShadow(w io.Writer, s *summary.Shadow, deadline time.Duration) {
	head, more := shadowWords(s, deadline)
	fmt.Fprintf(w, "\n%s\n", head)
	for _, l := range more {
		fmt.Fprintf(w, "  %s\n", l)
	}
}
