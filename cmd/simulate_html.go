package cmd

import (
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/cmd/internal/chart"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse/model"
)

// writeSimHTML writes simulate --html's page: each policy's figures (the
// ones simulate --json gives) and, on the same axes, their distributions
// of wait, elapsed, end-to-end time, tokens and USD per job, and their
// cost split into kept and wasted.
func writeSimHTML(o *SimulateOptions, sums []*model.Summary, modelName string) error {
	head, metrics := simHeader(o, sums)
	labels := head[1 : 1+len(sums)]
	figs := table{ID: "sim-table", Head: head}
	for _, m := range metrics {
		row := []any{m.name}
		for i, s := range sums {
			v := m.get(s)
			row = append(row, fig("policies."+strconv.Itoa(i)+"."+m.key, m.format(v, false), summary.Figure(v)))
		}
		if len(sums) == 2 {
			d := m.diff(sums[0], sums[1])
			row = append(row, fig("difference."+m.key, m.format(d, true), summary.Figure(d)))
		}
		figs.Rows = append(figs.Rows, row)
	}

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
	var drawn chartList
	for _, d := range dists {
		var series []chart.Series
		for i, s := range sums {
			v := d.get(s.Source)
			series = append(series, chart.Series{Name: labels[i], Values: v, Marks: []chart.Mark{
				{Label: "p50", X: v.Percentile(50)}, {Label: "p95", X: v.Percentile(95)}, {Label: "p99", X: v.Percentile(99)}}})
		}
		cdf := chart.CDF{Title: d.title, XLabel: d.xlabel, Unit: d.unit, Series: series, Rules: d.rules}
		if err := drawn.add(d.name, cdf.Write); err != nil {
			return err
		}
	}
	var tok, usd []chart.Stack
	for i, s := range sums {
		a := s.Source.All
		tok = append(tok, chart.Stack{Label: labels[i], Values: []float64{float64(a.TokensTotal - a.RetryTax.Tokens), float64(a.RetryTax.Tokens)}})
		usd = append(usd, chart.Stack{Label: labels[i], Values: []float64{float64(a.USDTotal - a.RetryTax.USD), float64(a.RetryTax.USD)}})
	}
	costs := chartList{n: drawn.n}
	if err := costs.add("sim-cost-tokens", chart.Bars{Title: "Tokens sent: kept answer vs retry tax", XLabel: "policy", YLabel: "tokens",
		Parts: []string{"kept", "wasted (retry tax)"}, Stacks: tok}.Write); err != nil {
		return err
	}
	if anyPriced(sums) {
		if err := costs.add("sim-cost-usd", chart.Bars{Title: "USD sent: kept answer vs retry tax", XLabel: "policy", YLabel: "US dollars ($)",
			Unit: "$", Parts: []string{"kept", "wasted (retry tax)"}, Stacks: usd}.Write); err != nil {
			return err
		}
	}
	// --ramp: the load each step put on the seats, first attempts and
	// retries (a storm is the retries' part growing and staying).
	steps := chartList{n: costs.n}
	if len(o.Ramp) > 0 {
		for i, s := range sums {
			var stacks []chart.Stack
			for k, st := range s.Steps[:min(len(s.Steps), len(o.Ramp))] {
				stacks = append(stacks, chart.Stack{Label: (time.Duration(k) * o.Ramp[0].For).String(),
					Values: []float64{float64(st.Attempts - st.Retries), float64(st.Retries)}})
			}
			if err := steps.add("sim-steps-"+strconv.Itoa(i), chart.Bars{Title: labels[i] + ": attempts sent per step", XLabel: "step start", YLabel: "attempts",
				Parts: []string{"first attempts", "retries"}, Stacks: stacks}.Write); err != nil {
				return err
			}
		}
	}
	title := "retrygate simulate: " + strings.Join(labels, ", ")
	return writePage(o.HTML, "simulate", map[string]any{"Title": title, "O": o, "Model": modelName, "Figures": figs,
		"Dists": drawn.html, "Costs": costs.html, "Steps": steps.html})
}
