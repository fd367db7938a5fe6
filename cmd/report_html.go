package cmd

import (
	"bytes"
	"cmp"
	"fmt"
	"html"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/cmd/internal/chart"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// pictures is what report --html and --svg draw from: the one summary,
// the held-out rows' own summary, and the drawing data gathered beside it.
type pictures struct {
	s, held      *summary.Summary
	d            *drawData
	waitCap      float64 // seconds; NaN when unknown
	deadline     float64
	tokenCeiling float64
	capsFrom     string // "the log's # policy line" or the config's source
	files        []string
	sampled      bool // a line was drawn through fewer points than it has
}

// namedChart is one chart: its file name for --svg, its section on the page.
type namedChart struct {
	name, section string
	scene         func() *chart.Scene
}

func (p *pictures) rules() []chart.Rule {
	return []chart.Rule{{Label: "wait cap " + chart.Fmt(p.waitCap, "s"), X: p.waitCap}, {Label: "deadline " + chart.Fmt(p.deadline, "s"), X: p.deadline}}
}

func marks(d summary.Dist) []chart.Mark {
	return []chart.Mark{{Label: "p50", X: float64(d.P50)}, {Label: "p95", X: float64(d.P95)}, {Label: "p99", X: float64(d.P99)}}
}

// maxDrawnGroups bounds the groups drawn as series (--by job can make
// thousands): the ones with the most rows, then (all).
const maxDrawnGroups = 8

// drawnGroup is a group drawn per group, with its index in the summary's
// groups (report --json's "groups"), or -1 for (all).
type drawnGroup struct {
	*summary.Group
	index int
}

// groupsOf lists the groups drawn: each group (at most maxDrawnGroups,
// those with the most rows, in the summary's order), then (all) when
// there is more than one; leftOut says how many were not drawn.
func groupsOf(s *summary.Summary) (gs []drawnGroup, leftOut int) {
	idx := make([]int, len(s.Groups))
	for i := range idx {
		idx[i] = i
	}
	if len(idx) > maxDrawnGroups {
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(s.Groups[b].Rows, s.Groups[a].Rows) })
		leftOut = len(idx) - maxDrawnGroups
		idx = idx[:maxDrawnGroups]
		slices.Sort(idx)
	}
	for _, i := range idx {
		gs = append(gs, drawnGroup{s.Groups[i], i})
	}
	if len(s.Groups) != 1 {
		gs = append(gs, drawnGroup{s.All, -1})
	}
	return gs, leftOut
}

func (p *pictures) charts() []namedChart {
	var out []namedChart
	by := string(p.s.By)
	type metric struct {
		key, label string
		dist       func(g *summary.Group) summary.Dist
	}
	metrics := []metric{
		{"wait", "wait: submit → first content byte (s)", func(g *summary.Group) summary.Dist { return g.Wait }},
		{"ttfb", "ttfb: submit → response headers (s)", func(g *summary.Group) summary.Dist { return g.TTFB }},
		{"elapsed", "elapsed: submit → last byte (s)", func(g *summary.Group) summary.Dist { return g.Elapsed }},
		{"gen", "gen: elapsed − wait (s)", func(g *summary.Group) summary.Dist { return g.Gen }},
	}
	groups, _ := groupsOf(p.s)
	for _, m := range metrics {
		var series, each []chart.Series
		for _, g := range groups {
			d := m.dist(g.Group)
			series = append(series, chart.Series{Name: g.Key, Values: d.Values, Marks: marks(d)})
			p.sampled = p.sampled || chart.Sampled(d.Values)
			if g.index >= 0 {
				each = append(each, series[len(series)-1])
			}
		}
		cdf := chart.CDF{Title: m.key + " per " + by + " (CDF, sent attempts)", XLabel: m.label, Unit: "s", Series: series, Rules: p.rules()}
		out = append(out, namedChart{"cdf-" + m.key, "dist", cdf.Scene})
		hist := chart.Hist{Title: m.key + " per " + by + " (histogram, stacked)", XLabel: m.label, Unit: "s", Series: each, Rules: p.rules()}
		out = append(out, namedChart{"hist-" + m.key, "dist", hist.Scene})
	}
	if p.held.Rows > 0 {
		for _, m := range metrics[:3] {
			d := m.dist(p.held.All)
			cdf := chart.CDF{Title: m.key + ", held-out rows apart (CDF)", XLabel: m.label, Unit: "s",
				Series: []chart.Series{{Name: "held out", Values: d.Values, Marks: marks(d)}}, Rules: p.rules()}
			out = append(out, namedChart{"held-cdf-" + m.key, "held", cdf.Scene})
		}
	}
	tl := chart.Timeline{Title: fmt.Sprintf("The %d slowest or failed jobs", len(p.s.Drawing.Timeline)), Jobs: p.s.Drawing.Timeline}
	out = append(out, namedChart{"timeline", "timeline", tl.Scene})

	bars, rates, spans, per := decisionBars(p.s.Drawing, p.s.Breaker)
	parts := []string{"sent"}
	for _, r := range admit.Reasons {
		parts = append(parts, "refuse: "+string(r))
	}
	parts = append(parts, "refuse: other")
	every := max(1, len(bars)/8)
	dec := chart.Bars{Title: "Decisions over time (rows per " + chart.Fmt(per, "s") + ")", XLabel: "time of submit (UTC)",
		YLabel: "rows (count)", Spans: spans, LabelEach: every}
	dec.Stacks, dec.Parts = dropEmptyParts(bars, parts)
	out = append(out, namedChart{"decisions", "time", dec.Scene})
	rateBars := make([]chart.Stack, len(bars))
	for i, b := range bars {
		rateBars[i] = chart.Stack{Label: b.Label}
	}
	rate := chart.Bars{Title: "Attempts sent per minute, per seat", XLabel: "time of submit (UTC)", YLabel: "attempts per minute",
		Stacks: rateBars, Lines: rates, LabelEach: every}
	out = append(out, namedChart{"seat-rate", "time", rate.Scene})

	var tok, usd []chart.Stack
	for _, g := range groups {
		tok = append(tok, chart.Stack{Label: g.Key, Values: []float64{float64(g.TokensTotal - g.RetryTax.Tokens), float64(g.RetryTax.Tokens)}})
		if !math.IsNaN(float64(g.RetryTax.USD)) {
			usd = append(usd, chart.Stack{Label: g.Key, Values: []float64{float64(g.USDTotal - g.RetryTax.USD), float64(g.RetryTax.USD)}})
		}
	}
	out = append(out, namedChart{"cost-tokens", "cost", chart.Bars{Title: "Tokens sent per " + by + ": kept answer vs retry tax", XLabel: by,
		YLabel: "tokens", Unit: "", Parts: []string{"kept", "wasted (retry tax)"}, Stacks: tok}.Scene})
	if len(usd) > 0 {
		out = append(out, namedChart{"cost-usd", "cost", chart.Bars{Title: "USD sent per " + by + ": kept answer vs retry tax", XLabel: by,
			YLabel: "US dollars ($)", Unit: "$", Parts: []string{"kept", "wasted (retry tax)"}, Stacks: usd}.Scene})
	}
	jt := chart.Hist{Title: "Tokens per job (sent attempts)", XLabel: "tokens per job (tokens)", Unit: "",
		Series: []chart.Series{{Name: "jobs", Values: p.s.Jobs.Tokens}}, Rules: []chart.Rule{{Label: "token ceiling " + chart.Fmt(p.tokenCeiling, ""), X: p.tokenCeiling}}}
	out = append(out, namedChart{"job-tokens", "cost", jt.Scene})
	if p.s.Jobs.USD.Len() > 0 {
		ju := chart.Hist{Title: "USD per job (sent attempts)", XLabel: "US dollars per job ($)", Unit: "$", Series: []chart.Series{{Name: "jobs", Values: p.s.Jobs.USD}}}
		out = append(out, namedChart{"job-usd", "cost", ju.Scene})
	}
	return out
}

// dropEmptyParts keeps the parts some bar has, so the legend lists only
// what the log holds.
func dropEmptyParts(bars []chart.Stack, parts []string) ([]chart.Stack, []string) {
	keep := []int{}
	for i := range parts {
		if slices.ContainsFunc(bars, func(b chart.Stack) bool { return b.Values[i] > 0 }) {
			keep = append(keep, i)
		}
	}
	if len(keep) == 0 {
		keep = []int{0}
	}
	out, names := make([]chart.Stack, len(bars)), make([]string, len(keep))
	for k, i := range keep {
		names[k] = parts[i]
	}
	for j, b := range bars {
		out[j] = chart.Stack{Label: b.Label}
		for _, i := range keep {
			out[j].Values = append(out[j].Values, b.Values[i])
		}
	}
	return out, names
}

// writeImages writes each chart to DIR/NAME.svg (--svg) or, the same
// scene painted at twice its size, DIR/NAME.png (--png).
func (p *pictures) writeImages(flag, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return badInput("%s: %v", flag, unwrapPathErr(err))
	}
	for _, c := range p.charts() {
		var b bytes.Buffer
		ext, write := ".svg", func() error { return chart.WriteSVG(&b, c.scene()) }
		if flag == "--png" {
			ext, write = ".png", func() error { return chart.WritePNG(&b, c.scene(), 2) }
		}
		if err := write(); err != nil {
			return err
		}
		data := b.Bytes()
		if err := writeFileAtomic(filepath.Join(dir, c.name+ext), data); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	return nil
}

// fig is one summary figure on the page, tagged with its path in
// report --json so a test (or a reader) can check it against the JSON.
func fig(path, text string, raw any) template.HTML {
	v := ""
	switch x := raw.(type) {
	case int64:
		v = strconv.FormatInt(x, 10)
	case summary.Figure:
		if f := float64(x); !math.IsNaN(f) && !math.IsInf(f, 0) {
			v = strconv.FormatFloat(f, 'f', -1, 64)
		} else {
			v = "null"
		}
	}
	return template.HTML(fmt.Sprintf(`<span class="fig" data-fig="%s" data-value="%s">%s</span>`, html.EscapeString(path), v, html.EscapeString(text)))
}

// figN is fig of a count, written as it is.
func figN(path string, n int64) template.HTML { return fig(path, strconv.FormatInt(n, 10), n) }

// html writes the page (pages.tmpl's "report").
func (p *pictures) html(path string) error {
	a := p.s.All
	cards := []card{
		{"jobs", figN("all.jobs", a.Jobs)},
		{"succeeded", figN("all.succeeded", a.Succeeded) + " " + fig("all.success_rate", tPct(a.SuccessRate), a.SuccessRate)},
		{"failed", figN("all.failed", a.Failed)},
		{"unknown outcomes", figN("all.unknown", a.Unknown) + " " + fig("all.unknown_rate", tPct(a.UnknownRate), a.UnknownRate)},
		{"attempts sent", figN("all.attempts", a.Attempts)},
		{"refused (never sent)", figN("all.refused", a.Refused)},
		{"attempts per success", fig("all.attempts_per_success", tRatio(a.AttemptsPerSuccess), a.AttemptsPerSuccess)},
		{"retry tax, tokens", figN("all.retry_tax.tokens", a.RetryTax.Tokens) + " " + fig("all.retry_tax.tokens_share", tPct(a.RetryTax.TokensShare), a.RetryTax.TokensShare)},
		{"retry tax, USD", fig("all.retry_tax.usd", tUSD(a.RetryTax.USD), a.RetryTax.USD) + " " + fig("all.retry_tax.usd_share", tPct(a.RetryTax.USDShare), a.RetryTax.USDShare)},
		{"wasted calls", figN("all.wasted_calls", a.WastedCalls)},
		{"fallback rate", fig("all.fallback_rate", tPct(a.FallbackRate), a.FallbackRate)},
	}
	if c := &a.Cache; hasCacheFigures([]*summary.Group{a}) {
		cards = append(cards,
			card{"cache write rate on retries", fig("all.cache.cache_write_rate_on_retries", tPct(c.WriteRateOnRetries), c.WriteRateOnRetries) + " " +
				fig("all.cache.retries_rewritten", fmt.Sprintf("%d/%d", c.Rewritten, c.Retries), c.Rewritten)},
			card{"cached share of input", fig("all.cache.cached_share", tPct(c.CachedShare), c.CachedShare)},
			card{"reasoning share of output", fig("all.cache.reasoning_share", tPct(c.ReasoningShare), c.ReasoningShare)},
			card{"cache saved, USD", fig("all.cache.saved_usd", tSignedUSD(c.SavedUSD), c.SavedUSD) + " " +
				fig("all.cache.retry_tax_usd_uncached", "retry tax at price_in "+tUSD(c.RetryTaxUncachedUSD), c.RetryTaxUncachedUSD)})
	}
	drawn := map[string]template.HTML{}
	for i, c := range p.charts() {
		var b bytes.Buffer
		if err := chart.WriteSVG(&b, c.scene()); err != nil {
			return err
		}
		drawn[c.section] += figure(i, c.name, b.String())
	}
	_, left := groupsOf(p.s)
	files := strings.Join(p.files, ", ")
	return writePage(path, "report", map[string]any{
		"Title": "retrygate report: " + files, "Files": files, "Rows": fig("rows", strconv.FormatInt(p.s.Rows, 10)+" rows", p.s.Rows),
		"Cards": cards, "PolicyLast": p.d.policy.seen, "Hashes": p.d.policy.hashes, "PolicyKV": p.d.policy.pairs(),
		"CapsFrom": p.capsFrom, "Charts": drawn, "By": string(p.s.By), "Percentiles": percentileTable(p),
		"LeftOut": left > 0, "Drawn": maxDrawnGroups, "Groups": len(p.s.Groups), "Held": p.held,
		"Sampled": p.sampled, "TimelineJobs": len(p.s.Drawing.Timeline), "Jobs": p.s.All.Jobs,
	})
}

// writePictures writes the page and the images, once the summary is whole.
func writePictures(opts *ReportOptions, s *summary.Summary, d *drawData, files []string) error {
	p := &pictures{s: s, held: d.held.Close(), d: d, files: files,
		waitCap: opts.Budget.MaxWait.Seconds(), deadline: opts.Budget.Deadline.Seconds(), tokenCeiling: float64(opts.Budget.TokenCeiling),
		capsFrom: opts.BudgetFrom}
	if d.policy.seen {
		pol := d.policy.last
		from := "the log's # policy line"
		if h := pol.Hash; h != "" {
			from += " (hash " + h + ")"
		}
		read := func(key string, into *float64) {
			if dur, err := admit.ParseDuration(pol.Get(key)); err == nil {
				*into = dur.Seconds()
			}
		}
		read("budget.max_wait", &p.waitCap)
		read("budget.deadline", &p.deadline)
		if n, err := admit.ParseCount(pol.Get("budget.token_ceiling")); err == nil {
			p.tokenCeiling = float64(admit.ClampTokens(n))
		}
		p.capsFrom = from
	}
	for _, out := range []struct{ flag, dir string }{{"--svg", opts.SVGDir}, {"--png", opts.PNGDir}} {
		if out.dir != "" {
			if err := p.writeImages(out.flag, out.dir); err != nil {
				return err
			}
		}
	}
	if opts.HTML != "" {
		return p.html(opts.HTML)
	}
	return nil
}
