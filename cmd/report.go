package cmd

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"retrygate/admit"
	"retrygate/ledgerfile"
	"retrygate/ledgerfile/summary"
)

// ReportOptions is what `retrygate report` runs with.
type ReportOptions struct {
	IO    *IOStreams
	Files []string // "-" is stdin
	By    summary.GroupBy
	// Since is an absolute time; SinceBack a duration back from the newest
	// row's ts (the log's own clock, never the machine's). At most one is set.
	Since     time.Time
	SinceBack time.Duration
	SinceArg  string
	JSON      bool
	CSV       bool
	Hist      string // "", "wait", "elapsed" or "tokens"
	SkipBad   bool
	MaxTokens int64
	SlowAfter time.Duration // retry.slow_5xx_after, for rows without billing
	// HistCap is the line the histogram marks (budget.max_wait, budget.deadline
	// or budget.token_ceiling), and HistCapLabel says where it was set.
	HistCap      float64
	HistCapLabel string
	// HTML is the page report --html writes, SVGDir where --svg writes
	// one image per chart (report_html.go).
	HTML, SVGDir, PNGDir string
	Budget               admit.Budget // the caps the pictures draw when the log has no # policy line
	BudgetFrom           string
}

func newReportCmd(f *Factory, runF func(*ReportOptions) error) *cobra.Command {
	opts := &ReportOptions{IO: f.IO}
	var by, since string
	cmd := &cobra.Command{
		Use:   "report [FILE...|-]",
		Short: "Turn rehearsal.log into the figures that matter: percentiles, retry tax, wasted calls",
		Long: `Report reads rehearsal.log (or the named logs; - is stdin) and prints,
per group (--by seat, model, job or outcome):

  attempts (sent), refused (never sent), jobs, and how jobs ended;
  exact nearest-rank percentiles p50 p75 p95 p99 max of wait_s, ttfb_s,
  elapsed_s and tokens over sent attempts;
  outcome counts and refusals by reason;
  attempts per successful job, retry ratio (attempts ÷ jobs);
  retry tax: tokens and USD of attempts that did not produce the kept
  answer, and their share of all;
  wasted calls (seed 000): non-ok attempts before their job's last attempt;
  billable-failure rate: failed attempts billed (ambiguous counts as
  billed) ÷ failed attempts; unknown outcomes; fallback activation rate.

It then suggests timeouts from the ok attempts (soft ≈ p75 of elapsed,
hard 1.5–2× p99; with --max-tokens the time that many tokens need at the
observed rate), each with the number of rows it rests on, and warns when
that is fewer than 30.

A row without a job id is a job of its own. --since takes an RFC 3339
time or a duration counted back from the newest row's ts (the log's own
clock); rows without a ts are always kept.

Output is tables on a terminal, tab-separated lines when piped (one line
per group, header first, stable column order), --csv, or --json.
--html FILE also writes one self-contained page of charts (no network:
inline SVG), --svg DIR one SVG image per chart and --png DIR the same
charts as PNG; --hist cdf draws the
CDFs of wait, ttfb and elapsed in the terminal under a sparkline row of
their percentiles.
A malformed row stops the report (exit 2, naming file and line) unless
--skip-bad; a torn last line is a warning, never an error.` +
			exitStatus("report written", "(not used)"),
		Example: `  retrygate report
  retrygate report --by outcome --since 24h rehearsal.log
  retrygate report --hist wait
  retrygate report --html report.html rehearsal.log
  retrygate report --json | jq '.all.retry_tax'`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			cfg, err := loadConfig(f, c, nil)
			if err != nil {
				return err
			}
			if opts.Files, err = logFiles(cfg, args); err != nil {
				return err
			}
			if opts.By, err = summary.ParseGroupBy(by); err != nil {
				return badInput("--by: %v", err)
			}
			if c.Flags().Changed("since") && strings.TrimSpace(since) == "" {
				return badInput("--since: empty (give an RFC 3339 time or a duration, or leave --since out)")
			}
			if since != "" {
				opts.SinceArg = since
				if opts.Since, opts.SinceBack, err = parseSince(since); err != nil {
					return badInput("--since: %v", err)
				}
			}
			if opts.JSON && opts.CSV {
				return badInput("--json and --csv: choose one")
			}
			if err := fillPictureOpts(c, cfg, opts); err != nil {
				return err
			}
			switch opts.Hist {
			case "":
			case "wait", "elapsed", "tokens", "cdf":
				if opts.JSON || opts.CSV {
					return badInput("--hist draws for a terminal; it does not combine with --json or --csv")
				}
				b, err := cfg.budget()
				if err != nil {
					return err
				}
				key := map[string]string{"wait": "budget.max_wait", "cdf": "budget.max_wait", "elapsed": "budget.deadline", "tokens": "budget.token_ceiling"}[opts.Hist]
				switch opts.Hist {
				case "wait", "cdf":
					opts.HistCap = b.MaxWait.Seconds()
				case "elapsed":
					opts.HistCap = b.Deadline.Seconds()
				default:
					opts.HistCap = float64(b.TokenCeiling)
				}
				opts.HistCapLabel = cfg.where(key)
			default:
				return badInput("--hist: unknown metric %q (want wait, elapsed, tokens or cdf)", opts.Hist)
			}
			if opts.MaxTokens < 0 {
				return badInput("--max-tokens: must not be negative, got %d", opts.MaxTokens)
			}
			if opts.MaxTokens > maxTokensFlag {
				return badInput("--max-tokens: %d is past any model's output (at most %d)", opts.MaxTokens, maxTokensFlag)
			}
			if opts.SlowAfter, err = cfg.duration("retry.slow_5xx_after"); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runReport(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&by, "by", "seat", "group rows by `seat`, model, job or outcome")
	fl.StringVar(&since, "since", "", "only rows from this RFC 3339 `time`, or this duration back from the newest row")
	fl.BoolVar(&opts.JSON, "json", false, "write JSON")
	fl.BoolVar(&opts.CSV, "csv", false, "write CSV (one line per group)")
	fl.StringVar(&opts.Hist, "hist", "", "draw a histogram of `wait`, elapsed or tokens, with the cap marked, or cdf: the CDFs of wait, ttfb and elapsed")
	fl.StringVar(&opts.HTML, "html", "", "also write one self-contained HTML page of charts to `FILE`")
	fl.StringVar(&opts.SVGDir, "svg", "", "also write each chart as an SVG image into `DIR`")
	fl.StringVar(&opts.PNGDir, "png", "", "also write each chart as a PNG image into `DIR`")
	fl.BoolVar(&opts.SkipBad, "skip-bad", false, "skip malformed rows (reported on stderr) instead of stopping")
	fl.Int64Var(&opts.MaxTokens, "max-tokens", 0, "also suggest the timeout a `N`-token answer needs at the observed rate")
	return cmd
}

// parseSince takes an RFC 3339 time, or a duration (Go syntax or bare seconds).
func parseSince(s string) (time.Time, time.Duration, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), 0, nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("%q is neither an RFC 3339 time (2025-01-02T15:04:05Z) nor a duration (24h, 90m)", s)
	}
	if d == 0 {
		return time.Time{}, 0, fmt.Errorf("duration %q is zero", s)
	}
	return time.Time{}, d, nil
}

// logSet is the logs a command reads, opened lazily; stdin is spooled to
// a temp file when it must be read twice (--since counted from the newest row).
type logSet struct {
	io    *IOStreams
	names []string
	spool string
	wrap  func(io.Reader) io.Reader // watches the bytes the strict read reads (report --html)
}

func (l *logSet) display(name string) string {
	if name == "-" {
		return "stdin"
	}
	return logDisplay(name)
}

func (l *logSet) open(name string) (io.ReadCloser, error) {
	if name == "-" {
		if l.spool != "" {
			return os.Open(l.spool)
		}
		return io.NopCloser(l.io.In), nil
	}
	if isDBLog(name) {
		return openLogReader(context.Background(), name)
	}
	fh, err := os.Open(name)
	if err != nil {
		return nil, badInput("failed to open log %q: %v", name, unwrapPathErr(err))
	}
	if st, err := fh.Stat(); err == nil && st.IsDir() {
		fh.Close()
		return nil, badInput("failed to read log %q: is a directory", name)
	}
	return fh, nil
}

func (l *logSet) close() {
	if l.spool != "" {
		_ = os.Remove(l.spool)
	}
}

// newest finds the newest ts over every log, spooling stdin first.
func (l *logSet) newest() (time.Time, bool, error) {
	var newest time.Time
	found := false
	for _, name := range l.names {
		if name == "-" && l.spool == "" {
			tmp, err := os.CreateTemp("", "retrygate-stdin-*.log")
			if err != nil {
				return newest, false, fmt.Errorf("failed to spool stdin: %w", err)
			}
			l.spool = tmp.Name()
			_, cerr := io.Copy(tmp, l.io.In)
			if err := tmp.Close(); cerr == nil {
				cerr = err
			}
			if cerr != nil {
				return newest, false, fmt.Errorf("failed to spool stdin: %w", cerr)
			}
		}
		rc, err := l.open(name)
		if err != nil {
			return newest, false, err
		}
		t, ok, err := summary.NewestTS(rc)
		rc.Close()
		if err != nil {
			return newest, false, badInput("failed to read log %q: %v", l.display(name), err)
		}
		if ok && (!found || t.After(newest)) {
			newest, found = t, true
		}
	}
	return newest, found, nil
}

// scan reads every log strictly, in order, handing each row to fn. Torn
// lines are warnings; malformed rows stop it (exit 2) unless skipBad,
// which lists them on stderr afterwards.
func (l *logSet) scan(skipBad bool, fn func(r *ledgerfile.Row, file string)) (torn, skipped []*ledgerfile.LineError, err error) {
	for _, name := range l.names {
		rc, err := l.open(name)
		if err != nil {
			return torn, skipped, err
		}
		disp := l.display(name)
		var in io.Reader = rc
		if l.wrap != nil {
			in = l.wrap(rc)
		}
		t, s, err := summary.Scan(in, disp, skipBad, func(r *ledgerfile.Row) { fn(r, disp) })
		rc.Close()
		torn, skipped = append(torn, t...), append(skipped, s...)
		for _, e := range t {
			fmt.Fprintf(l.io.ErrOut, "retrygate: warning: %s: line %d: torn write (no newline at end of line); skipped\n", e.File, e.Line)
		}
		if err != nil {
			var le *ledgerfile.LineError
			if errors.As(err, &le) {
				return torn, skipped, withHint(badInput("failed to read log %q: line %d: %v", le.File, le.Line, le.Err),
					"fix the row, or pass --skip-bad to skip malformed rows and list them")
			}
			return torn, skipped, badInput("%v", err)
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(l.io.ErrOut, "retrygate: warning: --skip-bad skipped %d malformed %s:\n", len(skipped), plural(len(skipped), "row", "rows"))
		for i, e := range skipped {
			if i == 20 {
				fmt.Fprintf(l.io.ErrOut, "retrygate: warning:   … and %d more\n", len(skipped)-20)
				break
			}
			fmt.Fprintf(l.io.ErrOut, "retrygate: warning:   %s:%d: %v\n", e.File, e.Line, e.Err)
		}
	}
	return torn, skipped, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func lineRefs(errs []*ledgerfile.LineError) []string {
	out := []string{}
	for _, e := range errs {
		out = append(out, fmt.Sprintf("%s:%d", e.File, e.Line))
	}
	return out
}

// resolveSince turns a relative --since into a time from the newest row.
func resolveSince(logs *logSet, since time.Time, back time.Duration) (time.Time, error) {
	if back == 0 {
		return since, nil
	}
	newest, ok, err := logs.newest()
	if err != nil {
		return time.Time{}, err
	}
	if !ok {
		return time.Time{}, nil // no row has a ts: every row is kept
	}
	return newest.Add(-back), nil
}

func runReport(opts *ReportOptions) error {
	logs := &logSet{io: opts.IO, names: opts.Files}
	defer logs.close()
	since, err := resolveSince(logs, opts.Since, opts.SinceBack)
	if err != nil {
		return err
	}
	sumOpts := summary.Options{By: opts.By, Since: since, SlowAfter: opts.SlowAfter}
	sum := summary.New(sumOpts)
	add := sum.Add
	var draw *drawData
	if opts.HTML != "" || opts.SVGDir != "" || opts.PNGDir != "" {
		draw = newDrawData(sum, sumOpts)
		logs.wrap = draw.policy.wrap
		add = func(r *ledgerfile.Row, file string) { sum.Add(r, file); draw.add(r, file) }
	}
	torn, skipped, err := logs.scan(opts.SkipBad, add)
	if err != nil {
		return err
	}
	s := sum.Summary()
	if draw != nil {
		if err := writePictures(opts, s, draw, displayNames(logs)); err != nil {
			return err
		}
	}
	recs := summary.Recommend(s, opts.MaxTokens)
	var warnings []string
	for _, r := range recs {
		if r.Warning != "" {
			warnings = append(warnings, r.Key+": "+r.Warning)
		}
	}
	if s.Rows == 0 {
		warnings = append(warnings, "no rows to report")
	}
	for _, w := range warnings {
		fmt.Fprintf(opts.IO.ErrOut, "retrygate: warning: %s\n", w)
	}
	switch {
	case opts.JSON:
		out := reportJSON{
			Files: displayNames(logs), By: string(s.By), Rows: s.Rows, RowsBeforeSince: s.Before,
			Groups: s.Groups, All: s.All, WastedCalls: s.Wasted, Recommendations: recs,
			Torn: lineRefs(torn), Skipped: lineRefs(skipped), Warnings: warnings,
		}
		if out.Groups == nil {
			out.Groups = []*summary.Group{}
		}
		if out.WastedCalls == nil {
			out.WastedCalls = []summary.Wasted{}
		}
		if out.Warnings == nil {
			out.Warnings = []string{}
		}
		if !since.IsZero() {
			out.Since = since.Format(time.RFC3339Nano)
		}
		return printJSON(opts.IO.Out, out)
	case opts.CSV:
		w := csv.NewWriter(opts.IO.Out)
		_ = w.Write(wideHeader())
		for _, g := range append(s.Groups, s.All) {
			_ = w.Write(wideRow(g))
		}
		w.Flush()
		return w.Error()
	case opts.Hist == "cdf":
		return drawCDFs(opts.IO.Out, s.All, opts.HistCap, opts.HistCapLabel, opts.IO.Width)
	case opts.Hist != "":
		return drawHist(opts.IO.Out, opts.Hist, s.All, opts.HistCap, opts.HistCapLabel, opts.IO.Width)
	case !opts.IO.OutTTY:
		rows := [][]string{}
		for _, g := range append(s.Groups, s.All) {
			rows = append(rows, wideRow(g))
		}
		return printTable(opts.IO, wideHeader(), rows)
	}
	return printReportTables(opts.IO, s, recs)
}

func displayNames(l *logSet) []string {
	out := make([]string, len(l.names))
	for i, n := range l.names {
		out[i] = l.display(n)
	}
	return out
}

type reportJSON struct {
	Files           []string                 `json:"files"`
	By              string                   `json:"by"`
	Since           string                   `json:"since,omitempty"`
	Rows            int64                    `json:"rows"`
	RowsBeforeSince int64                    `json:"rows_before_since"`
	Groups          []*summary.Group         `json:"groups"`
	All             *summary.Group           `json:"all"`
	WastedCalls     []summary.Wasted         `json:"wasted_calls"`
	Recommendations []summary.Recommendation `json:"recommendations"`
	Torn            []string                 `json:"torn"`
	Skipped         []string                 `json:"skipped"`
	Warnings        []string                 `json:"warnings"`
}

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
	for _, o := range admit.Outcomes {
		h = append(h, "outcome_"+string(o))
	}
	for _, r := range admit.Reasons {
		h = append(h, "refused_"+strings.ReplaceAll(string(r), " ", "_"))
	}
	h = append(h, "refused_other",
		"retry_tax_tokens", "retry_tax_tokens_share", "retry_tax_usd", "retry_tax_usd_share",
		"wasted_calls", "failed_attempts", "billed_failures", "billable_failure_rate",
		"unknown_rate", "fallback_jobs", "fallback_rate")
	return h
}

func wideRow(g *summary.Group) []string {
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	r := []string{g.Key, i(g.Rows), i(g.Attempts), i(g.Refused), i(g.HeldOut), i(g.Jobs), i(g.Succeeded), i(g.Failed), i(g.Unknown), i(g.Cancelled),
		plainNum(g.AttemptsPerSuccess, 4), plainNum(g.RetryRatio, 4)}
	for k, d := range []summary.Dist{g.Wait, g.TTFB, g.Elapsed, g.Tokens} {
		digits := 3
		if k == 3 {
			digits = 0 // tokens are whole
		}
		r = append(r, strconv.FormatInt(d.N, 10))
		for _, v := range []summary.Figure{d.P50, d.P75, d.P95, d.P99, d.Max} {
			r = append(r, plainNum(v, digits))
		}
	}
	for _, o := range admit.Outcomes {
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

// Terminal formats.
func tSec(f summary.Figure) string {
	if math.IsNaN(float64(f)) {
		return "-"
	}
	return strconv.FormatFloat(float64(f), 'f', 3, 64)
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

func printReportTables(s *IOStreams, sum *summary.Summary, recs []summary.Recommendation) error {
	groups := sum.Groups
	if len(groups) > 1 {
		groups = append(groups[:len(groups):len(groups)], sum.All)
	}
	by := string(sum.By)
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	title := func(t string) { fmt.Fprintf(s.Out, "\n%s\n", t) }

	n := func(v int64, one, many string) string { return fmt.Sprintf("%d %s", v, plural(int(v), one, many)) }
	fmt.Fprintf(s.Out, "%s, %s sent, %d refused, %s\n", n(sum.Rows, "row", "rows"), n(sum.All.Attempts, "attempt", "attempts"),
		sum.All.Refused, n(sum.All.Jobs, "job", "jobs"))
	if sum.Before > 0 {
		fmt.Fprintf(s.Out, "(%d older rows left out by --since)\n", sum.Before)
	}

	title("Attempts and jobs")
	var rows [][]string
	for _, g := range groups {
		rows = append(rows, []string{g.Key, i(g.Attempts), i(g.Refused), i(g.Jobs), i(g.Succeeded), i(g.Failed), i(g.Unknown),
			tRatio(g.AttemptsPerSuccess), tRatio(g.RetryRatio), tPct(g.UnknownRate), tPct(g.FallbackRate)})
	}
	if err := printTable(s, []string{by, "attempts", "refused", "jobs", "succeeded", "failed", "unknown",
		"attempts/success", "retry ratio", "unknown rate", "fallback rate"}, rows); err != nil {
		return err
	}

	title("Percentiles of sent attempts (nearest rank)")
	rows = nil
	for _, g := range groups {
		for _, m := range []struct {
			name string
			d    summary.Dist
		}{{"wait_s", g.Wait}, {"ttfb_s", g.TTFB}, {"elapsed_s", g.Elapsed}, {"tokens", g.Tokens}} {
			f := tSec
			if m.name == "tokens" {
				f = func(v summary.Figure) string {
					if math.IsNaN(float64(v)) {
						return "-"
					}
					return strconv.FormatFloat(float64(v), 'f', 0, 64)
				}
			}
			rows = append(rows, []string{g.Key, m.name, strconv.FormatInt(m.d.N, 10), f(m.d.P50), f(m.d.P75), f(m.d.P95), f(m.d.P99), f(m.d.Max)})
		}
	}
	if err := printTable(s, []string{by, "metric", "n", "p50", "p75", "p95", "p99", "max"}, rows); err != nil {
		return err
	}

	title("What retries cost")
	rows = nil
	for _, g := range groups {
		rows = append(rows, []string{g.Key, i(g.RetryTax.Tokens), tPct(g.RetryTax.TokensShare), tUSD(g.RetryTax.USD), tPct(g.RetryTax.USDShare),
			i(g.WastedCalls), fmt.Sprintf("%d/%d", g.BilledFailures, g.FailedAttempts), tPct(g.BillableFailureRate)})
	}
	if err := printTable(s, []string{by, "retry tax tokens", "share", "retry tax USD", "share", "wasted calls",
		"billed/failed", "billable failure rate"}, rows); err != nil {
		return err
	}

	title("Outcomes of sent attempts, and refusals")
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
	if err := printTable(s, []string{by, "outcome", "count"}, rows); err != nil {
		return err
	}

	title("Wasted calls: non-ok attempts before their job's last attempt (seed 000)")
	if len(sum.Wasted) == 0 {
		fmt.Fprintln(s.Out, "none")
	} else {
		rows = nil
		for _, w := range sum.Wasted {
			rows = append(rows, []string{w.Seat, w.Outcome, i(w.Calls), i(w.Tokens), tUSD(w.USD)})
		}
		if err := printTable(s, []string{"seat", "outcome", "wasted calls", "tokens", "USD"}, rows); err != nil {
			return err
		}
	}

	title("Suggested timeouts, from ok attempts")
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
	return printTable(s, []string{"setting", "suggested", "rests on", "how"}, rows)
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Gate order first, then anything else by name.
	rank := func(k string) int {
		for i, r := range admit.Reasons {
			if string(r) == k {
				return i
			}
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

// drawHist draws a small histogram of one metric over every sent attempt,
// with the cap that governs it marked: bins at or under the cap in █,
// bins past it in ░, and a rule where the cap falls.
func drawHist(w io.Writer, metric string, g *summary.Group, cap float64, capLabel string, width int) error {
	var d summary.Dist
	name, unit := metric, "s"
	switch metric {
	case "wait":
		d, name = g.Wait, "wait_s"
	case "elapsed":
		d, name = g.Elapsed, "elapsed_s"
	default:
		d, name, unit = g.Tokens, "tokens", ""
	}
	capName := map[string]string{"wait": "max_wait", "elapsed": "deadline", "tokens": "token_ceiling"}[metric]
	fmtV := func(v float64) string {
		if unit == "" {
			return strconv.FormatFloat(v, 'f', 0, 64)
		}
		return strconv.FormatFloat(v, 'f', 3, 64) + unit
	}
	fmt.Fprintf(w, "%s of %d sent attempts; %s = %s from %s\n", name, d.N, capName, fmtV(cap), capLabel)
	if d.N == 0 {
		fmt.Fprintln(w, "no values to draw")
		return nil
	}
	bins, step := histBins(d.Values.Max(), cap, unit == "")
	counts := make([]int64, bins)
	var over int64
	d.Values.Each(func(v float64, n int64) {
		// Bins are (lo, hi], the first [0, hi]: a value equal to the cap
		// is admitted by the gate, so it sits under the rule.
		b := int(math.Ceil(v/step-1e-9)) - 1
		b = max(0, min(b, bins-1))
		counts[b] += n
		if v > cap {
			over += n
		}
	})
	var most int64
	for _, c := range counts {
		most = max(most, c)
	}
	barMax := 40
	if width > 0 {
		barMax = max(10, min(60, width-40))
	}
	labelW := len(fmtV(float64(bins)*step))*2 + 3
	ruled := false
	for b, c := range counts {
		lo, hi := float64(b)*step, float64(b+1)*step
		if !ruled && lo >= cap-1e-9 {
			fmt.Fprintf(w, "%s %s %s\n", strings.Repeat("─", labelW), capName, fmtV(cap))
			ruled = true
		}
		n := 0
		if c > 0 {
			n = max(1, int(c*int64(barMax)/most))
		}
		ch := "█"
		if lo >= cap-1e-9 {
			ch = "░"
		}
		note := ""
		if lo < cap-1e-9 && hi > cap+1e-9 {
			note = fmt.Sprintf("  ← %s %s falls inside this bin", capName, fmtV(cap))
		}
		label := fmt.Sprintf("%s–%s", fmtV(lo), fmtV(hi))
		fmt.Fprintf(w, "%*s │%-*s %d%s\n", labelW, label, barMax, strings.Repeat(ch, n), c, note)
	}
	if !ruled {
		fmt.Fprintf(w, "%s %s %s (every value is under it)\n", strings.Repeat("─", labelW), capName, fmtV(cap))
	}
	fmt.Fprintf(w, "%d of %d (%.1f%%) over %s\n", over, d.N, 100*float64(over)/float64(d.N), capName)
	return nil
}

// histBins picks about a dozen equal bins of a round width (1, 2, 2.5 or
// 5 × 10^k) from 0 past the largest value, preferring a width that puts
// the cap exactly on a bin edge.
func histBins(maxV, cap float64, whole bool) (int, float64) {
	top := math.Max(maxV, cap)
	if top <= 0 {
		return 1, 1
	}
	count := func(step float64) int { return int(math.Ceil(top/step - 1e-9)) }
	best, bestScore := 0.0, math.Inf(1)
	for e := -3; e <= 12; e++ {
		for _, m := range []float64{1, 2, 2.5, 5} {
			step := m * math.Pow(10, float64(e))
			if whole && (step < 1 || step != math.Trunc(step)) {
				continue
			}
			n := count(step)
			if n < 4 || n > 30 {
				continue
			}
			score := math.Abs(float64(n) - 12)
			if q := cap / step; cap > 0 && math.Abs(q-math.Round(q)) > 1e-9 {
				score += 100 // the cap would fall inside a bin
			}
			if score < bestScore {
				best, bestScore = step, score
			}
		}
	}
	if best == 0 {
		best = top / 12
		if whole {
			best = math.Max(1, math.Ceil(best))
		}
	}
	return max(1, count(best)), best
}
