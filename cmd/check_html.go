package cmd

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"retrygate/ledgerfile/summary"
	"retrygate/ledgerfile/summary/chart"
)

// writeCheckHTML writes check --html's page: the verdict, each threshold's
// limit drawn over the distribution it judges, and the decisions the
// policy flips. Every figure is the check result's (check --json's).
func writeCheckHTML(path string, opts *CheckOptions, res *summary.CheckResult, files []string) error {
	var b bytes.Buffer
	pageHead(&b, "retrygate check: "+opts.Policy)
	verdict := `<span class="pass">PASS</span>`
	if !res.Pass {
		verdict = `<span class="fail">FAIL</span>`
	}
	fmt.Fprintf(&b, `<h1>retrygate check %s</h1><p class="note">policy %s · %s · logs %s</p>`, verdict,
		html.EscapeString(opts.Policy), html.EscapeString(budgetLine(opts.Budget)), html.EscapeString(strings.Join(files, ", ")))
	b.WriteString(`<section id="summary" class="summary">`)
	card := func(label, body string) {
		fmt.Fprintf(&b, `<div class="card">%s<b>%s</b></div>`, html.EscapeString(label), body)
	}
	card("rows judged", fig("rows", strconv.FormatInt(res.Judged, 10), res.Judged))
	card("jobs", fig("jobs", strconv.FormatInt(res.Summary.All.Jobs, 10), res.Summary.All.Jobs))
	card("thresholds failed", fig("thresholds_failed", strconv.Itoa(res.Failed), int64(res.Failed)))
	card("decisions flipped", fig("changes_total", strconv.FormatInt(res.ChangesTotal, 10), res.ChangesTotal))
	card("held-out rows", fig("held_out_rows", strconv.FormatInt(res.HeldOut.Rows, 10), res.HeldOut.Rows))
	card("held-out refused", strconv.Itoa(len(res.HeldOut.Refused)))
	b.WriteString(`</section>`)

	b.WriteString(`<h2 id="thresholds">Thresholds</h2><table id="threshold-table"><tr><th>metric</th><th>threshold</th><th>observed</th><th>n</th><th>verdict</th><th>where</th></tr>`)
	for i, t := range res.Thresholds {
		obs := "-"
		raw := summary.Figure(math.NaN())
		if t.Observed != nil {
			obs, raw = formatObserved(t.Spec, *t.Observed), summary.Figure(*t.Observed)
		}
		v := `<span class="pass">pass</span>`
		if !t.Pass {
			v = `<span class="fail">FAIL</span>`
		}
		fmt.Fprintf(&b, `<tr><td>%s</td><td><code>%s</code></td><td>%s</td><td>%d</td><td>%s</td><td style="text-align:left">%s %s</td></tr>`,
			html.EscapeString(t.Metric), html.EscapeString(t.Threshold), fig("thresholds."+strconv.Itoa(i)+".observed", obs, raw), t.N, v,
			html.EscapeString(t.Where), html.EscapeString(t.Note))
	}
	b.WriteString(`</table>`)

	// Each trend metric's distribution, with every limit on it drawn.
	b.WriteString(`<div class="charts">`)
	n := 0
	for _, metric := range []string{"wait_s", "ttfb_s", "elapsed_s", "tokens"} {
		var rules []chart.Rule
		for _, t := range res.Thresholds {
			if t.Metric != metric {
				continue
			}
			word := "pass"
			if !t.Pass {
				word = "FAIL"
			}
			rules = append(rules, chart.Rule{Label: t.Threshold + ": " + word, X: t.Limit})
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
		var buf bytes.Buffer
		if _, err := (chart.CDF{Title: metric + ": limits over the observed distribution", XLabel: label, Unit: unit,
			Series: []chart.Series{{Name: "judged rows", Values: d.Values, Marks: marks(d)}}, Rules: rules}).Write(&buf); err != nil {
			return err
		}
		b.WriteString(figure(n, "check-"+metric, buf.String()))
		n++
	}
	b.WriteString(`</div>`)

	fmt.Fprintf(&b, `<h2 id="changes">Decisions the policy flips</h2><p>%d %s flipped`, res.ChangesTotal, plural(int(res.ChangesTotal), "decision", "decisions"))
	if int64(len(res.Changes)) < res.ChangesTotal {
		fmt.Fprintf(&b, ` (the first %d listed; check --json lists the same)`, len(res.Changes))
	}
	b.WriteString(`.</p>`)
	changeTable(&b, "change-table", res.Changes)
	fmt.Fprintf(&b, `<h2 id="held-out">Held-out rows the budget refuses</h2><p>%d of %d held-out rows.</p>`, len(res.HeldOut.Refused), res.HeldOut.Rows)
	changeTable(&b, "held-out-table", res.HeldOut.Refused)
	b.WriteString(`</body></html>` + "\n")
	if err := writeFileAtomic(path, b.Bytes()); err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	return nil
}

func changeTable(b *bytes.Buffer, id string, rows []summary.Replayed) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, `<table id="%s"><tr><th>where</th><th>job</th><th>attempt</th><th>seat</th><th>logged</th><th>now</th><th>wait_s</th><th>elapsed_s</th><th>tokens</th><th>spent_s</th><th>used</th></tr>`, id)
	for _, r := range rows {
		fmt.Fprintf(b, `<tr><td>%s:%d</td><td>%s</td><td>%d</td><td>%s</td><td>%s</td><td><b>%s</b></td><td>%s</td><td>%s</td><td>%d</td><td>%s</td><td>%d</td></tr>`,
			html.EscapeString(r.File), r.Line, html.EscapeString(r.Job), r.Attempt, html.EscapeString(r.Seat), html.EscapeString(r.Logged), html.EscapeString(r.Now),
			strconv.FormatFloat(r.WaitS, 'f', 3, 64), strconv.FormatFloat(r.ElapsedS, 'f', 3, 64), r.Tokens, strconv.FormatFloat(r.SpentS, 'f', 3, 64), r.Used)
	}
	b.WriteString(`</table>`)
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
