package cmd

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

type reportJSON struct {
	Files           []string                 `json:"files"`
	By              string                   `json:"by"`
	Since           string                   `json:"since,omitempty"`
	Rows            int64                    `json:"rows"`
	RowsBeforeSince int64                    `json:"rows_before_since"`
	Groups          []*summary.Group         `json:"groups"`
	All             *summary.Group           `json:"all"`
	WastedCalls     []summary.Wasted         `json:"wasted_calls"`
	Stream          summary.StreamFigures    `json:"stream"` // TPOT, output tokens/s, ITL (docs/load.md)
	Recommendations []summary.Recommendation `json:"recommendations"`
	Torn            []string                 `json:"torn"`
	Skipped         []string                 `json:"skipped"`
	Warnings        []string                 `json:"warnings"`
}

// wideOutcomes are the outcome columns in their first place; an outcome
// class added since (laterOutcomes: incomplete) is a column at the end.
var wideOutcomes, laterOutcomes = admit.Outcomes[:9], admit.Outcomes[9:]

// Piped and CSV output: one line per group, every figure a column, in an
// order that never changes (new columns are only ever appended).
func wideHeader() []string {
	h := []string{"group", "rows", "attempts", "refused", "held_out", "jobs", "succeeded", "failed", "unknown", "cancelled",
		"attempts_per_success", "retry_ratio"}
	for _, m := range []string{"wait_s", "ttfb_s", "elapsed_s", "tokens"} {
		for _, p := range []string{"n", "p50", "p75", "p95", "p99", "max"} {
			h = append(h, m+"_"+p)
		}
	}
	for _, o := range wideOutcomes {
		h = append(h, "outcome_"+string(o))
	}
	for _, r := range admit.Reasons {
		h = append(h, "refused_"+strings.ReplaceAll(string(r), " ", "_"))
	}
	h = append(h, "refused_other",
		"retry_tax_tokens", "retry_tax_tokens_share", "retry_tax_usd", "retry_tax_usd_share",
		"wasted_calls", "failed_attempts", "billed_failures", "billable_failure_rate",
		"unknown_rate", "fallback_jobs", "fallback_rate",
		"retries_reporting_writes", "retries_rewritten", "cache_write_rate_on_retries", "cached_tokens", "cached_share",
		"cache_write_tokens", "reasoning_tokens", "reasoning_share", "cache_saved_usd", "retry_tax_usd_uncached")
	for _, o := range laterOutcomes {
		h = append(h, "outcome_"+string(o))
	}
	return h
}

func wideRow(g *summary.Group) []string {
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	r := []string{g.Key, i(g.Rows), i(g.Attempts), i(g.Refused), i(g.HeldOut), i(g.Jobs), i(g.Succeeded), i(g.Failed), i(g.Unknown), i(g.Cancelled),
		plainNum(g.AttemptsPerSuccess, 4), plainNum(g.RetryRatio, 4)}
	for k, d := range []summary.Dist{g.Wait, g.TTFB, g.Elapsed, g.Tokens} {
		r = append(r, strconv.FormatInt(d.N, 10))
		for _, v := range []summary.Figure{d.P50, d.P75, d.P95, d.P99, d.Max} {
			if k == 3 {
				r = append(r, plainNum(v, 0)) // tokens are whole
			} else {
				r = append(r, plainSec(v))
			}
		}
	}
	for _, o := range wideOutcomes {
		r = append(r, i(g.Outcomes[string(o)]))
	}
	known := int64(0)
	for _, reason := range admit.Reasons {
		n := g.Refusals[string(reason)]
		known += n
		r = append(r, i(n))
	}
	r = append(r, i(g.Refused-known),
		i(g.RetryTax.Tokens), plainNum(g.RetryTax.TokensShare, 4), plainNum(g.RetryTax.USD, 6), plainNum(g.RetryTax.USDShare, 4),
		i(g.WastedCalls), i(g.FailedAttempts), i(g.BilledFailures), plainNum(g.BillableFailureRate, 4),
		plainNum(g.UnknownRate, 4), i(g.FallbackJobs), plainNum(g.FallbackRate, 4))
	c := &g.Cache
	r = append(r, i(c.Retries), i(c.Rewritten), plainNum(c.WriteRateOnRetries, 4), i(c.CachedTokens), plainNum(c.CachedShare, 4),
		i(c.CacheWriteTokens), i(c.ReasoningTokens), plainNum(c.ReasoningShare, 4), plainNum(c.SavedUSD, 6), plainNum(c.RetryTaxUncachedUSD, 6))
	for _, o := range laterOutcomes {
		r = append(r, i(g.Outcomes[string(o)]))
	}
	return r
}

// plainNum is a number for scripts: fixed decimals, "" when undefined, "inf".
func plainNum(f summary.Figure, digits int) string {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return ""
	case math.IsInf(v, 1):
		return "inf"
	}
	return strconv.FormatFloat(v, 'f', digits, 64)
}

// plainSec is a figure in seconds for scripts (summary.SecondsText), ""
// when undefined.
func plainSec(f summary.Figure) string {
	if math.IsNaN(float64(f)) {
		return ""
	}
	return summary.SecondsText(float64(f))
}

// Terminal formats: "-" where a figure is undefined.
func tFixed(f summary.Figure, digits int) string {
	if math.IsNaN(float64(f)) {
		return "-"
	}
	return strconv.FormatFloat(float64(f), 'f', digits, 64)
}

// tSec is a figure in seconds (summary.SecondsText), "-" when undefined.
func tSec(f summary.Figure) string {
	if math.IsNaN(float64(f)) {
		return "-"
	}
	return summary.SecondsText(float64(f))
}

func tPct(f summary.Figure) string {
	if math.IsNaN(float64(f)) {
		return "-"
	}
	return strconv.FormatFloat(float64(f)*100, 'f', 1, 64) + "%"
}

func tRatio(f summary.Figure) string {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "∞"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func tUSD(f summary.Figure) string {
	if math.IsNaN(float64(f)) {
		return "-"
	}
	return "$" + strconv.FormatFloat(float64(f), 'f', 4, 64)
}

// tSignedUSD is tUSD for an amount that may be negative (the cache cost
// more than it saved).
func tSignedUSD(f summary.Figure) string {
	if v := float64(f); v < 0 {
		return "-$" + strconv.FormatFloat(-v, 'f', 4, 64)
	}
	return tUSD(f)
}

// hasCacheFigures says whether any group's rows reported a token part
// or cache pricing: the cache table is printed only then, so a log
// without parts reads as it always did.
func hasCacheFigures(groups []*summary.Group) bool {
	for _, g := range groups {
		c := &g.Cache
		if c.Retries > 0 || !math.IsNaN(float64(c.CachedShare)) || !math.IsNaN(float64(c.ReasoningShare)) || !math.IsNaN(float64(c.SavedUSD)) {
			return true
		}
	}
	return false
}

func printReportTables(s *IOStreams, sum *summary.Summary, recs []summary.Recommendation) error {
	groups := sum.Groups
	if len(groups) > 1 {
		groups = append(groups[:len(groups):len(groups)], sum.All)
	}
	by := string(sum.By)
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	title := func(t string) { fmt.Fprintf(s.Out, "\n%s\n", t) }
	// Each section: its title, then its table; a failed write ends the report.
	var err error
	table := func(t string, header []string, rows [][]string, narrow ...string) {
		if err == nil {
			title(t)
			err = printTable(s, header, rows, narrow...)
		}
	}

	n := func(v int64, one, many string) string { return fmt.Sprintf("%d %s", v, plural(int(v), one, many)) }
	fmt.Fprintf(s.Out, "%s, %s sent, %d refused, %s\n", n(sum.Rows, "row", "rows"), n(sum.All.Attempts, "attempt", "attempts"),
		sum.All.Refused, n(sum.All.Jobs, "job", "jobs"))
	if sum.Before > 0 {
		fmt.Fprintf(s.Out, "(%d older rows left out by --since)\n", sum.Before)
	}

	var rows [][]string
	for _, g := range groups {
		rows = append(rows, []string{g.Key, i(g.Attempts), i(g.Refused), i(g.Jobs), i(g.Succeeded), i(g.Failed), i(g.Unknown),
			tRatio(g.AttemptsPerSuccess), tRatio(g.RetryRatio), tPct(g.UnknownRate), tPct(g.FallbackRate)})
	}
	table("Attempts and jobs", []string{by, "attempts", "refused", "jobs", "succeeded", "failed", "unknown",
		"attempts/success", "retry ratio", "unknown rate", "fallback rate"}, rows, "unknown rate", "fallback rate", "refused")

	rows = nil
	for _, g := range groups {
		for _, m := range []struct {
			name string
			d    summary.Dist
		}{{"wait_s", g.Wait}, {"ttfb_s", g.TTFB}, {"elapsed_s", g.Elapsed}, {"tokens", g.Tokens}} {
			f := tSec
			if m.name == "tokens" {
				f = func(v summary.Figure) string { return tFixed(v, 0) } // tokens are whole
			}
			rows = append(rows, []string{g.Key, m.name, i(m.d.N), f(m.d.P50), f(m.d.P75), f(m.d.P95), f(m.d.P99), f(m.d.Max)})
		}
	}
	table("Percentiles of sent attempts (nearest rank)", []string{by, "metric", "n", "p50", "p75", "p95", "p99", "max"}, rows)

	rows = nil
	for _, g := range groups {
		rows = append(rows, []string{g.Key, i(g.RetryTax.Tokens), tPct(g.RetryTax.TokensShare), tUSD(g.RetryTax.USD), tPct(g.RetryTax.USDShare),
			i(g.WastedCalls), fmt.Sprintf("%d/%d", g.BilledFailures, g.FailedAttempts), tPct(g.BillableFailureRate)})
	}
	table("What retries cost", []string{by, "retry tax tokens", "share", "retry tax USD", "share", "wasted calls",
		"billed/failed", "billable failure rate"}, rows)

	if hasCacheFigures(groups) {
		rows = nil
		for _, g := range groups {
			c := &g.Cache
			rows = append(rows, []string{g.Key, fmt.Sprintf("%d/%d", c.Rewritten, c.Retries), tPct(c.WriteRateOnRetries),
				tPct(c.CachedShare), tPct(c.ReasoningShare), tSignedUSD(c.SavedUSD), tUSD(g.RetryTax.USD), tUSD(c.RetryTaxUncachedUSD)})
		}
		table("Prompt cache and reasoning (where the provider reports them)", []string{by, "retries rewritten",
			"cache write rate on retries", "cached share", "reasoning share", "cache saved USD", "retry tax USD", "at price_in"}, rows)
	}

	rows = nil
	for _, g := range groups {
		for _, o := range admit.Outcomes {
			if n := g.Outcomes[string(o)]; n > 0 {
				rows = append(rows, []string{g.Key, string(o), i(n)})
			}
		}
		for _, r := range sortedKeys(g.Refusals) {
			rows = append(rows, []string{g.Key, "refuse: " + r, i(g.Refusals[r])})
		}
	}
	table("Outcomes of sent attempts, and refusals", []string{by, "outcome", "count"}, rows)

	const wasted = "Wasted calls: non-ok attempts before their job's last attempt"
	if len(sum.Wasted) == 0 && err == nil {
		title(wasted)
		fmt.Fprintln(s.Out, "none")
	} else {
		rows = nil
		for _, w := range sum.Wasted {
			rows = append(rows, []string{w.Seat, w.Outcome, i(w.Calls), i(w.Tokens), tUSD(w.USD)})
		}
		table(wasted, []string{"seat", "outcome", "wasted calls", "tokens", "USD"}, rows)
	}

	rows = nil
	for _, r := range recs {
		v := tSec(r.Seconds) + "s"
		if r.Key == "timeouts.hard" && !math.IsNaN(float64(r.Low)) {
			v = fmt.Sprintf("%ss–%ss", tSec(r.Low), tSec(r.High))
		}
		if math.IsNaN(float64(r.Seconds)) {
			v = "-"
		}
		rests := i(r.Rows) + " " + plural(int(r.Rows), "row", "rows")
		if r.Warning != "" {
			rests += " (too few)"
		}
		rows = append(rows, []string{r.Key, v, rests, r.Basis})
	}
	table("Suggested timeouts, from ok attempts", []string{"setting", "suggested", "rests on", "how"}, rows)
	return err
}

func sortedKeys(m map[string]int64) []string {
	keys := slices.Collect(maps.Keys(m))
	// Gate order first, then anything else by name.
	rank := func(k string) int {
		if i := slices.Index(admit.Reasons, admit.Reason(k)); i >= 0 {
			return i
		}
		return len(admit.Reasons)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return keys
}
