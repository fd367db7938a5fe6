package cmd

import (
	"bytes"
	"cmp"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"retrygate/admit"
	"retrygate/ledgerfile/summary"
	"retrygate/ledgerfile/summary/chart"
)

// pictures is what report --html and --svg draw from: the one summary,
// the held-out rows' own summary, and the drawing data gathered beside it.
type pictures struct {
	s, held      *summary.Summary
	d            *drawData
	gen          map[string]summary.Dist
	genAll       summary.Dist
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
	write         func(io.Writer) error
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
		{"gen", "gen: elapsed − wait (s)", func(g *summary.Group) summary.Dist {
			if g == p.s.All {
				return p.genAll
			}
			return p.gen[g.Key]
		}},
	}
	groups, _ := groupsOf(p.s)
	for _, m := range metrics {
		var series, each []chart.Series
		for _, g := range groups {
			d := m.dist(g.Group)
			series = append(series, chart.Series{Name: g.Key, Values: d.Values, Marks: marks(d)})
			if g.index >= 0 {
				each = append(each, series[len(series)-1])
			}
		}
		cdf := chart.CDF{Title: m.key + " per " + by + " (CDF, sent attempts)", XLabel: m.label, Unit: "s", Series: series, Rules: p.rules()}
		out = append(out, namedChart{"cdf-" + m.key, "dist", func(w io.Writer) error {
			sampled, err := cdf.Write(w)
			p.sampled = p.sampled || sampled
			return err
		}})
		hist := chart.Hist{Title: m.key + " per " + by + " (histogram, stacked)", XLabel: m.label, Unit: "s", Series: each, Rules: p.rules()}
		out = append(out, namedChart{"hist-" + m.key, "dist", hist.Write})
	}
	if p.held.Rows > 0 {
		for _, m := range metrics[:3] {
			d := m.dist(p.held.All)
			cdf := chart.CDF{Title: m.key + ", held-out rows apart (CDF)", XLabel: m.label, Unit: "s",
				Series: []chart.Series{{Name: "held out", Values: d.Values, Marks: marks(d)}}, Rules: p.rules()}
			out = append(out, namedChart{"held-cdf-" + m.key, "held", func(w io.Writer) error { _, err := cdf.Write(w); return err }})
		}
	}
	tl := chart.Timeline{Title: fmt.Sprintf("The %d slowest or failed jobs", len(p.d.top)), Jobs: p.d.timeline()}
	out = append(out, namedChart{"timeline", "timeline", tl.Write})

	bars, rates, spans, per := p.d.decisionBars(p.s.Breaker)
	parts := []string{"admit"}
	for _, r := range admit.Reasons {
		parts = append(parts, "refuse: "+string(r))
	}
	parts = append(parts, "refuse: other")
	every := max(1, len(bars)/8)
	dec := chart.Bars{Title: "Decisions over time (rows per " + chart.Fmt(per, "s") + ")", XLabel: "time of submit (UTC)",
		YLabel: "rows (count)", Parts: parts, Stacks: bars, Spans: spans, LabelEach: every}
	dec.Stacks, dec.Parts = dropEmptyParts(bars, parts)
	out = append(out, namedChart{"decisions", "time", dec.Write})
	rateBars := make([]chart.Stack, len(bars))
	for i, b := range bars {
		rateBars[i] = chart.Stack{Label: b.Label}
	}
	rate := chart.Bars{Title: "Attempts sent per minute, per seat", XLabel: "time of submit (UTC)", YLabel: "attempts per minute",
		Stacks: rateBars, Lines: rates, LabelEach: every}
	out = append(out, namedChart{"seat-rate", "time", rate.Write})

	var tok, usd []chart.Stack
	for _, g := range groups {
		tok = append(tok, chart.Stack{Label: g.Key, Values: []float64{float64(g.TokensTotal - g.RetryTax.Tokens), float64(g.RetryTax.Tokens)}})
		if !math.IsNaN(float64(g.RetryTax.USD)) {
			usd = append(usd, chart.Stack{Label: g.Key, Values: []float64{float64(g.USDTotal - g.RetryTax.USD), float64(g.RetryTax.USD)}})
		}
	}
	out = append(out, namedChart{"cost-tokens", "cost", chart.Bars{Title: "Tokens sent per " + by + ": kept answer vs retry tax", XLabel: by,
		YLabel: "tokens", Unit: "", Parts: []string{"kept", "wasted (retry tax)"}, Stacks: tok}.Write})
	if len(usd) > 0 {
		out = append(out, namedChart{"cost-usd", "cost", chart.Bars{Title: "USD sent per " + by + ": kept answer vs retry tax", XLabel: by,
			YLabel: "US dollars ($)", Unit: "$", Parts: []string{"kept", "wasted (retry tax)"}, Stacks: usd}.Write})
	}
	jt := chart.Hist{Title: "Tokens per job (sent attempts)", XLabel: "tokens per job (tokens)", Unit: "",
		Series: []chart.Series{{Name: "jobs", Values: p.s.Jobs.Tokens}}, Rules: []chart.Rule{{Label: "token ceiling " + chart.Fmt(p.tokenCeiling, ""), X: p.tokenCeiling}}}
	out = append(out, namedChart{"job-tokens", "cost", jt.Write})
	if p.s.Jobs.USD.Len() > 0 {
		ju := chart.Hist{Title: "USD per job (sent attempts)", XLabel: "US dollars per job ($)", Unit: "$", Series: []chart.Series{{Name: "jobs", Values: p.s.Jobs.USD}}}
		out = append(out, namedChart{"job-usd", "cost", ju.Write})
	}
	return out
}

// dropEmptyParts keeps the parts some bar has, so the legend lists only
// what the log holds.
func dropEmptyParts(bars []chart.Stack, parts []string) ([]chart.Stack, []string) {
	keep := []int{}
	for i := range parts {
		for _, b := range bars {
			if b.Values[i] > 0 {
				keep = append(keep, i)
				break
			}
		}
	}
	if len(keep) == 0 {
		keep = []int{0}
	}
	out := make([]chart.Stack, len(bars))
	names := []string{}
	for _, i := range keep {
		names = append(names, parts[i])
	}
	for j, b := range bars {
		out[j] = chart.Stack{Label: b.Label}
		for _, i := range keep {
			out[j].Values = append(out[j].Values, b.Values[i])
		}
	}
	return out, names
}

// writeImages writes each chart to DIR/NAME.svg (--svg) or, painted
// from that same SVG at twice its size, DIR/NAME.png (--png).
func (p *pictures) writeImages(flag, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return badInput("%s: %v", flag, unwrapPathErr(err))
	}
	for _, c := range p.charts() {
		var b bytes.Buffer
		if err := c.write(&b); err != nil {
			return err
		}
		ext, data := ".svg", b.Bytes()
		if flag == "--png" {
			var img bytes.Buffer
			if err := chart.PNG(&b, &img, 2); err != nil {
				return err
			}
			ext, data = ".png", img.Bytes()
		}
		if err := writeFileAtomic(filepath.Join(dir, c.name+ext), data); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	return nil
}

// fig is one summary figure on the page, tagged with its path in
// report --json so a test (or a reader) can check it against the JSON.
func fig(path, text string, raw any) string {
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
	return fmt.Sprintf(`<span class="fig" data-fig="%s" data-value="%s">%s</span>`, html.EscapeString(path), v, html.EscapeString(text))
}

// html writes the page.
func (p *pictures) html(w io.Writer) error {
	a := p.s.All
	var b bytes.Buffer
	pageHead(&b, "retrygate report: "+strings.Join(p.files, ", "))
	fmt.Fprintf(&b, `<h1>retrygate report</h1><p class="note">%s · %s</p>`, html.EscapeString(strings.Join(p.files, ", ")),
		fig("rows", strconv.FormatInt(p.s.Rows, 10)+" rows", p.s.Rows))
	b.WriteString(`<section id="summary" class="summary">`)
	card := func(label, body string) {
		fmt.Fprintf(&b, `<div class="card">%s<b>%s</b></div>`, html.EscapeString(label), body)
	}
	card("jobs", fig("all.jobs", strconv.FormatInt(a.Jobs, 10), a.Jobs))
	card("succeeded", fig("all.succeeded", strconv.FormatInt(a.Succeeded, 10), a.Succeeded)+" "+fig("all.success_rate", tPct(a.SuccessRate), a.SuccessRate))
	card("failed", fig("all.failed", strconv.FormatInt(a.Failed, 10), a.Failed))
	card("unknown outcomes", fig("all.unknown", strconv.FormatInt(a.Unknown, 10), a.Unknown)+" "+fig("all.unknown_rate", tPct(a.UnknownRate), a.UnknownRate))
	card("attempts sent", fig("all.attempts", strconv.FormatInt(a.Attempts, 10), a.Attempts))
	card("refused (never sent)", fig("all.refused", strconv.FormatInt(a.Refused, 10), a.Refused))
	card("attempts per success", fig("all.attempts_per_success", tRatio(a.AttemptsPerSuccess), a.AttemptsPerSuccess))
	card("retry tax, tokens", fig("all.retry_tax.tokens", strconv.FormatInt(a.RetryTax.Tokens, 10), a.RetryTax.Tokens)+" "+
		fig("all.retry_tax.tokens_share", tPct(a.RetryTax.TokensShare), a.RetryTax.TokensShare))
	card("retry tax, USD", fig("all.retry_tax.usd", tUSD(a.RetryTax.USD), a.RetryTax.USD)+" "+fig("all.retry_tax.usd_share", tPct(a.RetryTax.USDShare), a.RetryTax.USDShare))
	card("wasted calls", fig("all.wasted_calls", strconv.FormatInt(a.WastedCalls, 10), a.WastedCalls))
	card("fallback rate", fig("all.fallback_rate", tPct(a.FallbackRate), a.FallbackRate))
	if c := &a.Cache; hasCacheFigures([]*summary.Group{a}) {
		card("cache write rate on retries", fig("all.cache.cache_write_rate_on_retries", tPct(c.WriteRateOnRetries), c.WriteRateOnRetries)+" "+
			fig("all.cache.retries_rewritten", fmt.Sprintf("%d/%d", c.Rewritten, c.Retries), c.Rewritten))
		card("cached share of input", fig("all.cache.cached_share", tPct(c.CachedShare), c.CachedShare))
		card("reasoning share of output", fig("all.cache.reasoning_share", tPct(c.ReasoningShare), c.ReasoningShare))
		card("cache saved, USD", fig("all.cache.saved_usd", tSignedUSD(c.SavedUSD), c.SavedUSD)+" "+
			fig("all.cache.retry_tax_usd_uncached", "retry tax at price_in "+tUSD(c.RetryTaxUncachedUSD), c.RetryTaxUncachedUSD))
	}
	b.WriteString(`</section>`)

	b.WriteString(`<h2 id="policy">Policy in force</h2>`)
	pw := &p.d.policy
	if pw.last == "" {
		fmt.Fprintf(&b, `<p>The log has no <code># policy</code> line. The lines drawn below come from %s.</p>`, html.EscapeString(p.capsFrom))
	} else {
		if len(pw.hashes) > 1 {
			fmt.Fprintf(&b, `<p><b>%d different policies wrote this log</b> (hashes %s); the last one is shown, and its caps are drawn.</p>`,
				len(pw.hashes), html.EscapeString(strings.Join(pw.hashes, ", ")))
		}
		b.WriteString(`<p class="policy">`)
		for _, kv := range parsePolicyLine(pw.last) {
			fmt.Fprintf(&b, `<code>%s=<b>%s</b></code> `, html.EscapeString(kv[0]), html.EscapeString(kv[1]))
		}
		b.WriteString(`</p>`)
	}

	charts := p.charts()
	rendered := map[string]string{}
	for i, c := range charts {
		var buf bytes.Buffer
		if err := c.write(&buf); err != nil {
			return err
		}
		rendered[c.section] += figure(i, c.name, buf.String())
	}
	sections := []struct{ id, title, intro string }{
		{"dist", "Distributions per " + string(p.s.By), fmt.Sprintf("Sent attempts only. Circles mark p50, p95 and p99 (the figures of <code>report --json</code>; gen, elapsed − wait, is counted by the same code). Dashed vermillion lines: the wait cap and the deadline, from %s.", html.EscapeString(p.capsFrom))},
		{"held", "Held-out rows, apart", "Rows marked <code>holdout=true</code>, kept out of tuning, summarised on their own."},
		{"timeline", "Jobs: the slowest or failed first", "Each attempt is a bar: wait solid, gen hatched; gaps are backoff sleeps; crosses are refusals with their reason; attempts on a fallback seat are vermillion and say so."},
		{"time", "Decisions over time", "Admits and refusals per time bucket, by reason (colour and pattern). Shaded spans: a seat's breaker open, from the log's <code># event breaker</code> lines (opened to closed), or, in a log without them, runs of rows the gate refused for an open breaker on that seat."},
		{"cost", "Cost", "Tokens and USD of sent attempts, split into the kept answer and the retry tax (attempts that did not produce the kept answer)."},
	}
	for _, sec := range sections {
		if rendered[sec.id] == "" {
			continue
		}
		fmt.Fprintf(&b, `<h2 id="%s">%s</h2><p class="note">%s</p>`, sec.id, html.EscapeString(sec.title), sec.intro)
		if sec.id == "held" {
			h := p.held.All
			fmt.Fprintf(&b, `<p>%d held-out rows, %d jobs, %d succeeded, wait p95 %s, elapsed p95 %s.</p>`, p.held.Rows, h.Jobs, h.Succeeded, tSec(h.Wait.P95), tSec(h.Elapsed.P95))
		}
		if sec.id == "timeline" {
			b.WriteString(`<p><label>Find a job by id: <input id="jobsearch" type="search" placeholder="job id"></label> <span id="jobfound" class="note"></span></p>`)
		}
		fmt.Fprintf(&b, `<div class="charts">%s</div>`, rendered[sec.id])
		if sec.id == "dist" {
			b.WriteString(percentileTable(p))
			if _, left := groupsOf(p.s); left > 0 {
				fmt.Fprintf(&b, `<p id="groups-left-out" class="note">%d of %d groups drawn (those with the most rows); (all) holds every row, and <code>report --json</code> every group.</p>`,
					maxDrawnGroups, len(p.s.Groups))
			}
		}
	}
	if p.sampled {
		b.WriteString(`<p id="sampled" class="note"><b>Down-sampled for drawing:</b> some lines are drawn through at most 400 points. Every figure printed or marked is computed from every row.</p>`)
	}
	fmt.Fprintf(&b, `<p class="note">The timeline shows %d of %d jobs; every job's figures are in <code>retrygate report --by job</code>.</p>`, len(p.d.top), p.d.jobsN)
	b.WriteString(`<script>
(function(){var i=document.getElementById('jobsearch');if(!i)return;i.addEventListener('input',function(){
var q=i.value.trim(),n=0;document.querySelectorAll('.lane').forEach(function(l){var m=q===''||l.dataset.job.indexOf(q)>=0;l.style.opacity=m?1:0.15;if(m&&q)n++});
document.getElementById('jobfound').textContent=q?n+' of the jobs drawn match; others: retrygate report --by job':''})})();
</script></body></html>
`)
	_, err := w.Write(b.Bytes())
	return err
}

// writePictures writes the page and the images, once the summary is whole.
func writePictures(opts *ReportOptions, s *summary.Summary, d *drawData, files []string) error {
	d.close()
	p := &pictures{s: s, held: d.held.Close(), d: d, gen: map[string]summary.Dist{}, files: files,
		waitCap: opts.Budget.MaxWait.Seconds(), deadline: opts.Budget.Deadline.Seconds(), tokenCeiling: float64(opts.Budget.TokenCeiling),
		capsFrom: opts.BudgetFrom}
	for _, k := range d.genOrder {
		p.gen[k] = d.gen[k].Dist()
	}
	p.genAll = d.genAll.Dist()
	if d.policy.last != "" {
		pol := parsePolicyLine(d.policy.last)
		from := "the log's # policy line"
		if h := pol.get("hash"); h != "" {
			from += " (hash " + h + ")"
		}
		read := func(key string, into *float64) {
			if dur, err := admit.ParseDuration(pol.get(key)); err == nil {
				*into = dur.Seconds()
			}
		}
		read("budget.max_wait", &p.waitCap)
		read("budget.deadline", &p.deadline)
		if n, err := strconv.ParseInt(pol.get("budget.token_ceiling"), 10, 64); err == nil {
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
		var b bytes.Buffer
		if err := p.html(&b); err != nil {
			return err
		}
		if err := writeFileAtomic(opts.HTML, b.Bytes()); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
	}
	return nil
}
