package cmd

import (
	"encoding/csv"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
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
		Long: `Report reads rehearsal.log (or the named logs; - is stdin) and prints
what it says, per seat (or --by model, job or outcome).

Per group:

  attempts (sent), refused (never sent), jobs, and how jobs ended;
  exact nearest-rank percentiles p50 p75 p95 p99 max of wait_s, ttfb_s,
  elapsed_s and tokens over sent attempts;
  outcome counts and refusals by reason;
  attempts per successful job, retry ratio (attempts ÷ jobs);
  retry tax: tokens and USD of attempts that did not produce the kept
  answer, and their share of all;
  wasted calls: non-ok attempts before their job's last attempt;
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
		RunE: runE(opts, func(c *cobra.Command, args []string) error {
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
			if opts.Hist != "" {
				key, ok := histCapKey[opts.Hist]
				if !ok {
					return badInput("--hist: unknown metric %q (want wait, elapsed, tokens or cdf)", opts.Hist)
				}
				if opts.JSON || opts.CSV {
					return badInput("--hist draws for a terminal; it does not combine with --json or --csv")
				}
				if opts.HistCap, err = cfg.number(key); err != nil {
					return err
				}
				opts.HistCapLabel = cfg.where(key)
			}
			if opts.MaxTokens < 0 {
				return badInput("--max-tokens: must not be negative, got %d", opts.MaxTokens)
			}
			if opts.MaxTokens > maxTokensFlag {
				return badInput("--max-tokens: %d is past any model's output (at most %d)", opts.MaxTokens, maxTokensFlag)
			}
			opts.SlowAfter, err = cfg.duration("retry.slow_5xx_after")
			return err
		}, runF, runReport),
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
	d, err := admit.ParseDuration(s)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("%q is neither an RFC 3339 time (2025-01-02T15:04:05Z) nor a duration (24h, 90m)", s)
	}
	if d == 0 {
		return time.Time{}, 0, fmt.Errorf("duration %q is zero", s)
	}
	return time.Time{}, d, nil
}

func runReport(opts *ReportOptions) error {
	logs := &logSet{io: opts.IO, names: opts.Files}
	defer logs.close()
	since, err := resolveSince(logs, opts.Since, opts.SinceBack)
	if err != nil {
		return err
	}
	sumOpts := summary.Options{By: opts.By, Since: since, SlowAfter: opts.SlowAfter}
	pictures := opts.HTML != "" || opts.SVGDir != "" || opts.PNGDir != ""
	heldOpts := sumOpts
	sumOpts.Draw = pictures
	sum := summary.New(sumOpts)
	add := sum.Add
	logs.event = sum.AddEvent // the breaker's spans
	logs.endLog = sum.EndLog
	var draw *drawData
	if pictures {
		draw = newDrawData(heldOpts)
		logs.comment = draw.policy.comment
		add = func(r *ledgerfile.Row, file string) { sum.Add(r, file); draw.add(r, file) }
		logs.endLog = func() { sum.EndLog(); draw.endLog() }
	}
	torn, skipped, err := logs.scan(opts.SkipBad, add)
	if err != nil {
		return err
	}
	s := sum.Close()
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
	if opts.JSON {
		// The warnings are the document's own, beside the figures they
		// are about. The lists are copied into empty ones: JSON writes []
		// for none, not null.
		out := reportJSON{
			Files: displayNames(logs), By: string(s.By), Rows: s.Rows, RowsBeforeSince: s.Before,
			Groups: append([]*summary.Group{}, s.Groups...), All: s.All, WastedCalls: append([]summary.Wasted{}, s.Wasted...),
			Stream: s.Stream, Recommendations: recs, Torn: lineRefs(torn), Skipped: lineRefs(skipped), Warnings: append([]string{}, warnings...),
		}
		if !since.IsZero() {
			out.Since = since.Format(time.RFC3339Nano)
		}
		return printJSON(opts.IO.Out, out)
	}
	// The suggested timeouts are in the terminal's tables only: their
	// warnings follow the output there, once. Elsewhere only an empty
	// log is worth one.
	if tables := !opts.CSV && opts.Hist == "" && opts.IO.OutTTY; !tables {
		warnings = nil
		if s.Rows == 0 {
			warnings = append(warnings, "no rows to report")
		}
	}
	defer func() {
		for _, w := range warnings {
			fmt.Fprintf(opts.IO.ErrOut, "retrygate: warning: %s\n", w)
		}
	}()
	switch {
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
