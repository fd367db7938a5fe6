package cmd

import (
	"bytes"
	"fmt"
	"html"
	"strconv"
	"strings"
	"time"

	"retrygate/ledgerfile/summary"
	"retrygate/ledgerfile/summary/chart"
	"retrygate/rehearse/model"
)

// writeSimHTML writes simulate --html's page: each policy's figures (the
// ones simulate --json gives) and, on the same axes, their distributions
// of wait, elapsed, end-to-end time, tokens and USD per job, and their
// cost split into kept and wasted.
func writeSimHTML(o *SimulateOptions, sums []*model.Summary, metrics []simMetric, modelName string) error {
	var b bytes.Buffer
	var labels []string
	for i := range sums {
		labels = append(labels, o.Policies[i].Label)
	}
	title := "retrygate simulate: " + strings.Join(labels, ", ")
	pageHead(&b, title)
	fmt.Fprintf(&b, `<h1>%s</h1><p class="note">%d jobs per policy, seed %d, model <code>%s</code></p>`,
		html.EscapeString(title), o.Jobs, o.Seed, html.EscapeString(modelName))

	b.WriteString(`<h2 id="figures">Figures</h2><table id="sim-table"><tr><th>metric</th>`)
	for _, l := range labels {
		fmt.Fprintf(&b, `<th>%s</th>`, html.EscapeString(l))
	}
	if len(sums) == 2 {
		b.WriteString(`<th>difference</th>`)
	}
	b.WriteString(`</tr>`)
	for _, m := range metrics {
		if m.priced && !anyPriced(sums) {
			continue
		}
		fmt.Fprintf(&b, `<tr><td>%s</td>`, html.EscapeString(m.name))
		for i, s := range sums {
			v := m.get(s)
			fmt.Fprintf(&b, `<td>%s</td>`, fig("policies."+strconv.Itoa(i)+"."+m.key, m.format(v, false), summary.Figure(v)))
		}
		if len(sums) == 2 {
			d := m.diff(sums[0], sums[1])
			fmt.Fprintf(&b, `<td>%s</td>`, fig("difference."+m.key, m.format(d, true), summary.Figure(d)))
		}
		b.WriteString(`</tr>`)
	}
	b.WriteString(`</table>`)

	rules := func(seconds bool) []chart.Rule {
		var out []chart.Rule
		for i := range sums {
			bu := o.Policies[i].Policy.Budget
			if seconds {
				out = append(out, chart.Rule{Label: labels[i] + " wait cap " + chart.Fmt(bu.MaxWait.Seconds(), "s"), X: bu.MaxWait.Seconds()},
					chart.Rule{Label: labels[i] + " deadline " + chart.Fmt(bu.Deadline.Seconds(), "s"), X: bu.Deadline.Seconds()})
			} else {
				out = append(out, chart.Rule{Label: labels[i] + " token ceiling " + chart.Fmt(float64(bu.TokenCeiling), ""), X: float64(bu.TokenCeiling)})
			}
		}
		return out
	}
	type dist struct {
		name, title, xlabel, unit string
		get                       func(*summary.Summary) summary.Sorted
		rules                     []chart.Rule
	}
	dists := []dist{
		{"sim-wait", "wait per attempt (CDF)", "wait: submit → first content byte (s)", "s", func(s *summary.Summary) summary.Sorted { return s.All.Wait.Values }, rules(true)},
		{"sim-elapsed", "elapsed per attempt (CDF)", "elapsed: submit → last byte (s)", "s", func(s *summary.Summary) summary.Sorted { return s.All.Elapsed.Values }, rules(true)},
		{"sim-end-to-end", "end to end per job (CDF)", "job start → its last byte (s)", "s", func(s *summary.Summary) summary.Sorted { return s.Jobs.EndToEnd }, rules(true)},
		{"sim-tokens", "tokens per job (CDF)", "tokens per job (tokens)", "", func(s *summary.Summary) summary.Sorted { return s.Jobs.Tokens }, rules(false)},
	}
	if anyPriced(sums) {
		dists = append(dists, dist{"sim-usd", "USD per job (CDF)", "US dollars per job ($)", "$", func(s *summary.Summary) summary.Sorted { return s.Jobs.USD }, nil})
	}
	b.WriteString(`<h2 id="dist">Distributions on the same axes</h2><p class="note">Circles mark p50, p95 and p99 of each policy.</p><div class="charts">`)
	n := 0
	for _, d := range dists {
		var series []chart.Series
		for i, s := range sums {
			v := d.get(s.Source)
			series = append(series, chart.Series{Name: labels[i], Values: v, Marks: []chart.Mark{
				{Label: "p50", X: v.Percentile(50)}, {Label: "p95", X: v.Percentile(95)}, {Label: "p99", X: v.Percentile(99)}}})
		}
		var buf bytes.Buffer
		if _, err := (chart.CDF{Title: d.title, XLabel: d.xlabel, Unit: d.unit, Series: series, Rules: d.rules}).Write(&buf); err != nil {
			return err
		}
		b.WriteString(figure(n, d.name, buf.String()))
		n++
	}
	b.WriteString(`</div><h2 id="cost">Cost: kept answer vs retry tax</h2><div class="charts">`)
	var tok, usd []chart.Stack
	for i, s := range sums {
		a := s.Source.All
		tok = append(tok, chart.Stack{Label: labels[i], Values: []float64{float64(a.TokensTotal - a.RetryTax.Tokens), float64(a.RetryTax.Tokens)}})
		usd = append(usd, chart.Stack{Label: labels[i], Values: []float64{float64(a.USDTotal - a.RetryTax.USD), float64(a.RetryTax.USD)}})
	}
	costs := []chart.Bars{{Title: "Tokens sent: kept answer vs retry tax", XLabel: "policy", YLabel: "tokens", Parts: []string{"kept", "wasted (retry tax)"}, Stacks: tok}}
	if anyPriced(sums) {
		costs = append(costs, chart.Bars{Title: "USD sent: kept answer vs retry tax", XLabel: "policy", YLabel: "US dollars ($)", Unit: "$", Parts: []string{"kept", "wasted (retry tax)"}, Stacks: usd})
	}
	for i, c := range costs {
		var buf bytes.Buffer
		if err := c.Write(&buf); err != nil {
			return err
		}
		b.WriteString(figure(n, []string{"sim-cost-tokens", "sim-cost-usd"}[i], buf.String()))
		n++
	}
	b.WriteString(`</div>`)
	if len(o.Ramp) > 0 {
		// --ramp: the load each step put on the seats, first attempts and
		// retries (a storm is the retries' part growing and staying).
		b.WriteString(`<h2 id="steps">Load per step: first attempts and retries</h2><div class="charts">`)
		for i, s := range sums {
			var stacks []chart.Stack
			for k, st := range s.Steps[:min(len(s.Steps), len(o.Ramp))] {
				stacks = append(stacks, chart.Stack{Label: (time.Duration(k) * o.Ramp[0].For).String(),
					Values: []float64{float64(st.Attempts - st.Retries), float64(st.Retries)}})
			}
			var buf bytes.Buffer
			c := chart.Bars{Title: labels[i] + ": attempts sent per step", XLabel: "step start", YLabel: "attempts",
				Parts: []string{"first attempts", "retries"}, Stacks: stacks}
			if err := c.Write(&buf); err != nil {
				return err
			}
			b.WriteString(figure(n, "sim-steps-"+strconv.Itoa(i), buf.String()))
			n++
		}
		b.WriteString(`</div>`)
	}
	b.WriteString(`</body></html>` + "\n")
	if err := writeFileAtomic(o.HTML, b.Bytes()); err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	return nil
}
