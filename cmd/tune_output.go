package cmd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/retrygate/retrygate/ledgerfile/summary"
)

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
	SetAside    []summary.Aside      `json:"set_aside"`
	Budget      budgetJSON           `json:"budget"`
	HeldOut     heldOutJSON          `json:"held_out"`
	Warnings    []string             `json:"warnings"`
}

func printTuneJSON(opts *TuneOptions, logs *logSet, s *summary.Summary, t summary.Tuned, ho summary.HeldOut, warnings []string) error {
	out := tuneJSON{
		Logs: displayNames(logs), Rows: s.Rows, Attempts: s.All.Attempts, Jobs: s.All.Jobs, Margin: opts.Margin,
		Suggestions: t.Lines, SetAside: t.Aside, Budget: toBudgetJSON(t.Budget),
		HeldOut:  heldOutJSON{Rows: ho.Rows, Verified: ho.Rows > 0, Agree: ho.Agree(), Refused: ho.Refused},
		Warnings: warnings,
	}
	if out.SetAside == nil {
		out.SetAside = []summary.Aside{}
	}
	return printJSON(opts.IO.Out, out)
}

func writeTuneYAML(s *IOStreams, sum *summary.Summary, t summary.Tuned, ho summary.HeldOut) {
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
	if len(t.Aside) > 0 {
		fmt.Fprintln(w, "# Beside max_wait, not in it: attempts that produced no content (their wait is how")
		fmt.Fprintln(w, "# long the error took, not how long an answer waits):")
		for _, a := range t.Aside {
			fmt.Fprintf(w, "#   %-13s %d %s, p95 wait_s %ss\n", a.Outcome, a.Rows, plural(int(a.Rows), "attempt", "attempts"), summary.SecondsText(float64(a.WaitP95)))
		}
	}
	switch {
	case ho.Rows == 0:
		fmt.Fprintln(w, "# UNVERIFIED: no held-out rows. These caps fit the rows they came from, and nothing")
		fmt.Fprintln(w, "# has tested them on a run they were not fitted to (curve-fitting).")
	case ho.Agree():
		what := fmt.Sprintf("all %d held-out rows", ho.Rows)
		if ho.Rows == 1 {
			what = "the 1 held-out row"
		}
		fmt.Fprintf(w, "# Held-out check: the suggested budget admits %s. The held-out rows agree.\n", what)
	default:
		fmt.Fprintf(w, "# Held-out check: the suggested budget REFUSES %d of %d held-out %s. The held-out rows DO NOT agree.\n",
			len(ho.Refused), ho.Rows, plural(int(ho.Rows), "row", "rows"))
		for _, r := range ho.Refused {
			attempt := "-"
			if r.Attempt > 0 {
				attempt = strconv.Itoa(r.Attempt)
			}
			fmt.Fprintf(w, "#   %s:%d job=%s attempt=%s  %s  wait_s=%s elapsed_s=%s tokens=%d spent_s=%s spent_tokens=%d used=%d\n",
				r.File, r.Line, orDash(r.Job), attempt, replayedNow(r), summary.SecondsText(r.WaitS), summary.SecondsText(r.ElapsedS), r.Tokens,
				summary.SecondsText(r.SpentS), r.SpentTokens, r.Used)
		}
		fmt.Fprintln(w, "# Believe the refusal: explain it in one sentence, raise the cap in public,")
		fmt.Fprintln(w, "# or shrink the job; do not widen the caps until the held-out run passes.")
	}
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
