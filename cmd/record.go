package cmd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
)

// RecordOptions is one hand-observed attempt to append.
type RecordOptions struct {
	IO      *IOStreams
	Now     func() time.Time
	LogPath string
	Budget  admit.Budget
	SlowAt  time.Duration     // retry.slow_5xx_after, for the billing class
	Retry   admit.RetryPolicy // the retry rules the decision applies
	Windows map[string]int64  // the seats' context windows, for a retry after a context-length error
	Fsync   bool
	Row     ledgerfile.Row // filled from flags; attempt, spend and decision are computed
}

func newRecordCmd(f *Factory, runF func(*RecordOptions) error) *cobra.Command {
	opts := &RecordOptions{IO: f.IO, Now: f.Now}
	var budgetKeys map[string]string
	c := &cobra.Command{
		Use:   "record",
		Short: "Append one hand-observed attempt to rehearsal.log",
		Long: `Append one attempt you timed by hand (a stopwatch, curl -w, a provider
dashboard) to the rehearsal log, and print the line appended.

record numbers the attempt from the job's earlier rows, computes the
job's spend before it (spent_s, spent_tokens, used) and the gate's
decision on it under the budget, and appends one line. Every value is
checked before the log is touched; the log is locked while the job's
rows are read and the line is written, so many concurrent record
processes never number two attempts alike.

--elapsed runs from submit to the last byte, so it includes the wait.

record records: an attempt the gate refuses is appended too, with the
refusal as its decision, and the exit status says which it was, so a
shell loop can stop retrying on 1. On bad input (2) nothing is appended.

With a retry budget (retry.budget), a retry (attempt 2 or later) is also
judged on the log's sends of every job in the budget's window before its
ts, read under the same lock; the counts go on the row (window_firsts,
window_retries), so check replays it on them. Attempts other shells have
in flight are not in the log yet and are not counted. A PostgreSQL log
leaves the budget out.` +
			exitStatus("appended, and the gate admits the attempt (decision=admit)",
				"appended, and the gate refuses the attempt (decision=\"refuse: <reason>\" on the row printed)"),
		Example: `  # the free-seat demo, attempt 1: 1.2 s to the first byte, done at 7.2 s, 2100 tokens
  retrygate record --job demo-1 --seat scratch --wait 1.2 --elapsed 7.2 --tokens 2100`,
		Args: cobra.NoArgs,
		RunE: runE(opts, func(c *cobra.Command, _ []string) error { return opts.fill(f, c, budgetKeys) }, runF, runRecord),
	}
	budgetKeys = budgetFlags(c)
	fl := c.Flags()
	fl.String("job", "", "job `id` (required)")
	fl.String("seat", "", "seat `name`")
	fl.String("model", "", "model `name`")
	fl.String("wait", "", "queue wait, submit to first byte (`duration`, required)")
	fl.String("elapsed", "", "submit to last byte (`duration`, required)")
	fl.String("ttfb", "", "submit to response headers (`duration`)")
	fl.String("tokens", "", "prompt + completion `tokens` (required unless both parts are given)")
	fl.String("prompt-tokens", "", "prompt `tokens`")
	fl.String("completion-tokens", "", "completion `tokens`")
	fl.String("outcome", "ok", "outcome `class`: ok, conn_error, rate_limited, client_error, server_error, timeout, wait_cap, reset, cancelled, incomplete")
	fl.String("http-status", "", "HTTP `status`")
	fl.String("cost", "", "attempt cost in `USD`")
	fl.Bool("holdout", false, "keep this row out of tuning (judged apart by check)")
	fl.String("note", "", "free `text` (never a prompt or a key)")
	fl.String("ts", "", "submit time, RFC 3339 (default now)")
	fl.StringVar(&opts.LogPath, "log", "", "rehearsal `log` to append to (default rehearsal.log; config log)")
	fl.BoolVar(&opts.Fsync, "fsync", false, "fsync the log after writing")
	return c
}

func (o *RecordOptions) fill(f *Factory, c *cobra.Command, budgetKeys map[string]string) error {
	cfg, err := loadConfig(f, c, mergeFlags(budgetKeys, map[string]string{"log": "log"}))
	if err != nil {
		return err
	}
	pol, seats, err := cfg.policy() // the budget section first, as cfg.budget() reads it
	if err != nil {
		return err
	}
	o.Budget, o.Retry, o.SlowAt = pol.Budget, pol.Retry, pol.Retry.SlowServerAfter
	o.Windows = rehearse.Windows(seats)
	if o.LogPath, err = cfg.str("log"); err != nil {
		return err
	}
	if strings.TrimSpace(o.LogPath) == "" {
		return badInput("--log: empty path")
	}
	r := &o.Row
	get := func(name string) string { return c.Flags().Lookup(name).Value.String() }
	r.Job = get("job")
	if strings.TrimSpace(r.Job) == "" {
		return badInput("--job: required (the logical request this attempt belongs to)")
	}
	r.Seat, r.Model, r.Note = get("seat"), get("model"), get("note")
	for _, v := range []struct{ flag, val string }{{"job", r.Job}, {"seat", r.Seat}, {"model", r.Model}, {"note", r.Note}} {
		if err := oneLine(v.val); err != nil {
			return badInput("--%s: %v", v.flag, err)
		}
	}
	for _, need := range []string{"wait", "elapsed"} {
		if !c.Flags().Changed(need) {
			return badInput("--%s: required", need)
		}
	}
	if r.Wait, _, err = flagValue(c, "wait", admit.ParseDuration); err != nil {
		return err
	}
	if r.Elapsed, _, err = flagValue(c, "elapsed", admit.ParseDuration); err != nil {
		return err
	}
	if r.Elapsed < r.Wait {
		return withHint(badInput("--elapsed %s is before --wait %s", r.Elapsed, r.Wait),
			"elapsed runs from submit to the last byte, so it includes the wait: the seed's 1.2 s wait + 6.0 s is --elapsed 7.2")
	}
	if r.TTFB, r.HasTTFB, err = flagValue(c, "ttfb", admit.ParseDuration); err != nil {
		return err
	}
	tokens, hasTokens, err := flagValue(c, "tokens", admit.ParseCount)
	if err != nil {
		return err
	}
	p, hasP, err := flagValue(c, "prompt-tokens", admit.ParseCount)
	if err != nil {
		return err
	}
	cpl, hasC, err := flagValue(c, "completion-tokens", admit.ParseCount)
	if err != nil {
		return err
	}
	switch {
	case hasP != hasC:
		return badInput("--prompt-tokens and --completion-tokens go together")
	case hasP && hasTokens && tokens != p+cpl:
		return badInput("--tokens %d is not --prompt-tokens %d + --completion-tokens %d", tokens, p, cpl)
	case hasP:
		tokens, r.PromptTokens, r.CompletionTokens, r.HasSplit = p+cpl, p, cpl, true
	case !hasTokens:
		return badInput("--tokens: required (or --prompt-tokens with --completion-tokens)")
	}
	r.Tokens, r.TokensFrom = tokens, ledgerfile.FromHand
	if r.Outcome, err = admit.ParseOutcome(get("outcome")); err != nil {
		return badInput("--outcome: %v", err)
	}
	if st, set, err := flagValue(c, "http-status", admit.ParseCount); err != nil {
		return err
	} else if set {
		if st < 100 || st > 599 {
			return badInput("--http-status: %d is not an HTTP status", st)
		}
		r.HTTPStatus = int(st)
	}
	r.Billing = admit.BillingOf(r.Outcome, r.Elapsed, o.SlowAt)
	if r.CostUSD, r.HasCost, err = flagValue(c, "cost", admit.ParseAmount); err != nil {
		return err
	}
	r.Holdout, _ = c.Flags().GetBool("holdout")
	if c.Flags().Changed("ts") && strings.TrimSpace(get("ts")) == "" {
		return badInput("--ts: empty (give an RFC 3339 time, or leave --ts out for now)")
	}
	if ts := get("ts"); ts != "" {
		if r.TS, err = time.Parse(time.RFC3339Nano, ts); err != nil {
			return badInput("--ts: not an RFC 3339 time %q", ts)
		}
		if err := ledgerfile.CheckTS(r.TS); err != nil {
			return badInput("--ts: %v", err)
		}
	} else {
		r.TS = o.Now()
	}
	r.TS = r.TS.UTC()
	return nil
}

// oneLine refuses a value the log cannot keep as given: more than one
// line, control characters, invalid UTF-8, or longer than a log value.
func oneLine(v string) error {
	switch {
	case strings.ContainsAny(v, "\n\r"):
		return errors.New("must be one line")
	case !utf8.ValidString(v):
		return errors.New("not valid UTF-8")
	case len(v) > ledgerfile.MaxValue:
		return fmt.Errorf("longer than %d bytes", ledgerfile.MaxValue)
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return errors.New("holds a control character")
	}
	return nil
}

func runRecord(o *RecordOptions) error {
	rules := ledgerfile.Rules{Budget: o.Budget, Retry: o.Retry, Windows: o.Windows}
	var row ledgerfile.Row
	if isDBLog(o.LogPath) {
		// Many machines: the database numbers the attempt under its lock.
		ctx := context.Background()
		l, err := openLog(ctx, o.IO.ErrOut, o.LogPath, o.Fsync)
		if err != nil {
			return err
		}
		defer l.Close()
		err = l.AppendJob(ctx, o.Row.Job, func(earlier []ledgerfile.Row) ([]ledgerfile.Row, error) {
			var err error
			row, err = ledgerfile.NextRow(earlier, o.Row, rules)
			return []ledgerfile.Row{row}, err
		})
		if err != nil {
			return withHint(badInputErr(err), dbHint)
		}
	} else {
		w := ledgerfile.NewWriter(o.LogPath, o.Fsync)
		defer w.Close()
		var err error
		if row, err = ledgerfile.Record(w, o.Row, rules); err != nil {
			return badInputErr(err)
		}
	}
	fmt.Fprintln(o.IO.Out, ledgerfile.FormatRow(&row))
	if !row.Admitted() {
		return refused // appended, and refused: the row says why
	}
	return nil
}
