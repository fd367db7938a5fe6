package cmd

import (
	"html"
	"html/template"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/cmd/internal/chart"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// writeCheckHTML writes check --html's page: the verdict, each threshold's
// limit drawn over the distribution it judges, and the decisions the
// policy flips, and on a shadow proxy's log what enforcing would change.
// Every figure is the check result's (check --json's).
func writeCheckHTML(path string, opts *CheckOptions, res *summary.CheckResult, files []string) error {
	cards := []card{
		{"rows judged", figN("rows", res.Judged)},
		{"jobs", figN("jobs", res.Summary.All.Jobs)},
		{"thresholds failed", figN("thresholds_failed", int64(res.Failed))},
		{"decisions flipped", figN("changes_total", res.ChangesTotal)},
		{"held-out rows", figN("held_out_rows", res.HeldOut.Rows)},
		{"held-out refused", template.HTML(strconv.Itoa(len(res.HeldOut.Refused)))},
	}
	word := map[bool]string{true: "pass", false: "FAIL"} // a failure stands out
	thresholds := table{ID: "threshold-table", Head: []string{"metric", "threshold", "observed", "n", "verdict", "where"}}
	for i, t := range res.Thresholds {
		v := template.HTML(`<span class="` + strings.ToLower(word[t.Pass]) + `">` + word[t.Pass] + `</span>`)
		thresholds.Rows = append(thresholds.Rows, []any{t.Metric, template.HTML("<code>" + html.EscapeString(t.Threshold) + "</code>"),
			fig("thresholds."+strconv.Itoa(i)+".observed", formatObserved(t.Spec, t.Value), summary.Figure(t.Value)), t.N, v, t.Where + " " + t.Note})
	}

	// Each trend metric's distribution, with every limit on it drawn.
	var charts chartList
	for _, metric := range []string{"wait_s", "ttfb_s", "elapsed_s", "tokens"} {
		var rules []chart.Rule
		for _, t := range res.Thresholds {
			if t.Metric != metric {
				continue
			}
			rules = append(rules, chart.Rule{Label: t.Threshold + ": " + word[t.Pass], X: t.Limit})
		}
		if len(rules) == 0 {
			continue
		}
		d := map[string]summary.Dist{"wait_s": res.Summary.All.Wait, "ttfb_s": res.Summary.All.TTFB,
			"elapsed_s": res.Summary.All.Elapsed, "tokens": res.Summary.All.Tokens}[metric]
		unit, label := "s", metric+" ("+"s)"
		if metric == "tokens" {
			unit, label = "", "tokens per attempt (tokens)"
		}
		cdf := chart.CDF{Title: metric + ": limits over the observed distribution", XLabel: label, Unit: unit,
			Series: []chart.Series{{Name: "judged rows", Values: d.Values, Marks: marks(d)}}, Rules: rules}
		if err := charts.add("check-"+metric, cdf.Write); err != nil {
			return err
		}
	}
	var shadow map[string]any
	if res.Shadow != nil {
		head, more := shadowWords(res.Shadow, opts.Budget.Deadline)
		t := table{ID: "shadow-table", Head: []string{"figure", "value"}}
		for _, f := range shadowFigures(res.Shadow) {
			t.Rows = append(t.Rows, []any{f.Label, figN(f.Path, f.N)})
		}
		shadow = map[string]any{"Head": head, "More": more, "Table": t}
	}
	return writePage(path, "check", map[string]any{
		"Title": "retrygate check: " + opts.Policy, "Res": res, "Policy": opts.Policy, "Budget": budgetLine(opts.Budget),
		"Logs": strings.Join(files, ", "), "Cards": cards, "Thresholds": thresholds, "Charts": charts.html,
		"Decisions": plural(int(res.ChangesTotal), "decision", "decisions"),
		"Changes":   changeTable("change-table", res.Changes), "HeldOut": changeTable("held-out-table", res.HeldOut.Refused),
		"Shadow": shadow,
	})
}

// changeTable is the replayed rows' table, the columns the text report
// prints, the decision now in bold.
func changeTable(id string, rs []summary.Replayed) table {
	t := table{ID: id, Head: replayHeader()}
	for _, r := range replayRows(rs, len(rs)) {
		row := make([]any, len(r))
		for i, cell := range r {
			row[i] = cell
		}
		row[5] = template.HTML("<b>" + html.EscapeString(r[5]) + "</b>")
		t.Rows = append(t.Rows, row)
	}
	return t
}

// checkHTMLFlag checks --html as report's is checked.
func checkHTMLFlag(c *cobra.Command, path string) error {
	if c.Flags().Changed("html") && strings.TrimSpace(path) == "" {
		return badInput("--html: empty (give a path, or leave --html out)")
	}
	if path == "-" {
		return badInput("--html: give a file name; the page is not written to stdout")
	}
	return checkOutPath("--html", path)
}
