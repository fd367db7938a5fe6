package cmd

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
)

// AdmitOptions is one gate question: may the job's next attempt go?
type AdmitOptions struct {
	IO     *IOStreams
	Budget admit.Budget
	Spent  admit.Spent
	Next   admit.Next
	// From a log: the job's spend and, unless given by flags, the estimate.
	LogPath string
	Job     string
	Seat    string
	JSON    bool
	NoRows  bool // the log holds no row of the job: nothing observed yet
	// Books is the job's rows from --log, as record and the attempt loop
	// keep them (empty without --log): its retry rules decide with the
	// gate, so admit --log prints the decision record would write.
	Books ledgerfile.JobGate
	// Rules are the policy's budget and retry rules --log's rows are read
	// under.
	Rules ledgerfile.Rules
	// RetryBudget and Window are the policy's retry budget and its counts
	// now, from --log's rows of every job, when the next attempt is a
	// retry (the job has rows); HasWindow false leaves the budget out.
	RetryBudget admit.RetryBudgetConfig
	Window      admit.BudgetWindow
	HasWindow   bool
}

func newAdmitCmd(f *Factory, runF func(*AdmitOptions) error) *cobra.Command {
	opts := &AdmitOptions{IO: f.IO}
	var budgetKeys map[string]string
	c := &cobra.Command{
		Use:   "admit",
		Short: "Run the gate: may the next attempt be sent?",
		Long: `Run the four-number gate for a job's next attempt and print exactly
"admit" or "refuse: <reason>", then what the budget has left.

The checks run in this order; the first failure is the reason, and every
failing check is listed beside it. Equality admits.

  1. attempts used >= attempt cap              refuse: attempt cap
  2. next wait > wait cap                      refuse: queue wait
  3. next wait + next gen > time left          refuse: deadline
  4. spent tokens + next tokens > ceiling      refuse: token ceiling
  5. spent USD + next USD > spend ceiling      refuse: spend ceiling

Gen is elapsed - wait, the part after the first byte: --next-elapsed
runs from submit to the last byte, so it already holds the wait, and
check 3 counts the wait once.

The job's spend and the next attempt come from flags, or from a log:
--log FILE --job ID sums the job's sent attempts and estimates the next
one conservatively (the last observed wait, the last elapsed of an
attempt that returned, the last prompt + completion tokens; --seat S
takes the estimate from that seat's rows). --next-* flags override the
estimate. A missing log is bad input (the gate fails closed); a log with
no row of the job is a first attempt, and says so on stderr. The job's
rows are read from the end of the log, back to its latest row that
carries the spend before it, so a long log answers at once.

With --log, the retry rules decide first, as record and the attempt loop
decide: after a failure they may refuse the retry ("refuse: permanent
error", "refuse: retry limit"), and the gate's failing checks are listed
beside that reason. A breaker is the seat's state across jobs, held by a
running rehearse or proxy: a log's breaker refusals stay as written, and
admit --log judges the job by its own rows. With a retry budget
(retry.budget) and a log file, a retry that everything else admits is
refused when the log's retries of every job in the window before now are
over it ("refuse: retry budget"); a PostgreSQL log leaves it out.` + exitStatus("admit", "refuse"),
		Example: `  # the free-seat demo's second attempt: an 18 s queue wait against a 5 s cap
  # (18 s to the first byte, then 9 s of answer: elapsed 27 s); refused (exits 1)
  retrygate admit --deadline 45s --token-ceiling 8000 --max-attempts 2 --max-wait 5s \
    --spent 7.2 --spent-tokens 2100 --used 1 --next-wait 18 --next-elapsed 27 --next-tokens 2400

  # the same question from rehearsal.log
  retrygate admit --log rehearsal.log --job demo-1`,
		Args: cobra.NoArgs,
		RunE: runE(opts, func(c *cobra.Command, _ []string) error { return opts.fill(f, c, budgetKeys) }, runF, runAdmit),
	}
	budgetKeys = budgetFlags(c)
	fl := c.Flags()
	fl.String("spent", "", "time the job has spent (`duration`)")
	fl.String("spent-tokens", "", "tokens the job has spent")
	fl.String("used", "", "attempts the job has used")
	fl.String("spent-usd", "", "USD the job has spent")
	fl.String("next-wait", "", "next attempt's queue wait (`duration`)")
	fl.String("next-elapsed", "", "next attempt's elapsed, submit to last byte (`duration`)")
	fl.String("next-tokens", "", "next attempt's prompt + completion tokens")
	fl.String("next-usd", "", "next attempt's cost in USD")
	fl.StringVar(&opts.LogPath, "log", "", "derive spend and estimate from this rehearsal `log`")
	fl.StringVar(&opts.Job, "job", "", "job `id` in the log")
	fl.StringVar(&opts.Seat, "seat", "", "estimate from this `seat`'s rows")
	fl.BoolVar(&opts.JSON, "json", false, "print JSON")
	return c
}

func (o *AdmitOptions) fill(f *Factory, c *cobra.Command, budgetKeys map[string]string) error {
	cfg, err := loadConfig(f, c, budgetKeys)
	if err != nil {
		return err
	}
	if o.Budget, err = cfg.budget(); err != nil {
		return err
	}
	if c.Flags().Changed("job") && strings.TrimSpace(o.Job) == "" {
		return badInput("--job: empty job id")
	}
	if (o.LogPath == "") != (o.Job == "") {
		return badInput("--log and --job go together")
	}
	if o.Seat != "" && o.LogPath == "" {
		return badInput("--seat needs --log")
	}
	spentFlags := []string{"spent", "spent-tokens", "used", "spent-usd"}
	nextFlags := []string{"next-wait", "next-elapsed", "next-tokens", "next-usd"}
	if o.LogPath != "" {
		for _, name := range spentFlags {
			if c.Flags().Changed(name) {
				return badInput("--%s: the spend comes from --log; give one or the other", name)
			}
		}
		// A missing log is bad input, not an empty one: the gate fails closed.
		rows, err := readJob(f.Ctx, o.LogPath, o.Job)
		if err != nil {
			return badInputErr(err)
		}
		o.NoRows = len(rows) == 0
		pol, seats, err := cfg.policy()
		if err != nil {
			return err
		}
		o.Rules = ledgerfile.Rules{Budget: o.Budget, Retry: pol.Retry, Windows: rehearse.Windows(seats)}
		o.Books.Books(o.Rules, rows)
		o.Spent, o.Next = o.Books.Estimate(o.Seat)
		if o.RetryBudget = pol.Retry.Budget; o.RetryBudget.Enabled() && len(rows) > 0 && !isDBLog(o.LogPath) {
			// The next attempt is a retry: the budget counts the log's
			// sends of every job in its window before now, as record does.
			now := f.Now()
			window, err := ledgerfile.WindowTail(o.LogPath, ledgerfile.WindowCut(o.RetryBudget, now))
			if err != nil {
				return badInputErr(err)
			}
			o.Window, o.HasWindow = ledgerfile.BudgetOf(o.RetryBudget, window).Window(now), true
		}
	} else {
		given := false
		for _, name := range append(spentFlags, nextFlags...) {
			given = given || c.Flags().Changed(name)
		}
		if !given {
			return withHint(badInput("admit needs the job's spend and next attempt"),
				"give --spent/--spent-tokens/--used and --next-wait/--next-elapsed/--next-tokens, or --log FILE --job ID")
		}
	}
	nextElapsed := o.Next.Elapsed()
	if err := cmp.Or(
		flagInto(c, "spent", admit.ParseDuration, &o.Spent.Time),
		flagInto(c, "next-wait", admit.ParseDuration, &o.Next.Wait),
		flagInto(c, "next-elapsed", admit.ParseDuration, &nextElapsed),
	); err != nil {
		return err
	}
	if !c.Flags().Changed("next-elapsed") {
		nextElapsed = max(nextElapsed, o.Next.Wait) // from --log, or no generation time given
	}
	if nextElapsed < o.Next.Wait {
		return withHint(badInput("--next-elapsed %s is before --next-wait %s", nextElapsed, o.Next.Wait),
			"elapsed runs from submit to the last byte, so it includes the wait")
	}
	o.Next.Gen = nextElapsed - o.Next.Wait
	used := int64(o.Spent.Attempts)
	if err := cmp.Or(
		flagInto(c, "spent-tokens", admit.ParseCount, &o.Spent.Tokens),
		flagInto(c, "next-tokens", admit.ParseCount, &o.Next.Tokens),
		flagInto(c, "used", admit.ParseCount, &used),
	); err != nil {
		return err
	}
	if used > 1<<20 && c.Flags().Changed("used") {
		return badInput("--used: %d is too large", used)
	}
	o.Spent.Attempts = int(used)
	return cmp.Or(
		flagInto(c, "spent-usd", admit.ParseAmount, &o.Spent.USD),
		flagInto(c, "next-usd", admit.ParseAmount, &o.Next.USD),
	)
}

// admitJSON is the --json shape: the same content as the table.
type admitJSON struct {
	Decision  string   `json:"decision"`
	Admit     bool     `json:"admit"`
	Reason    string   `json:"reason,omitempty"`
	Failing   []string `json:"failing,omitempty"`
	Budget    numbers  `json:"budget"`
	Spent     numbers  `json:"spent"`
	Next      numbers  `json:"next"`
	Remaining numbers  `json:"remaining"`
}

type numbers struct {
	Seconds  *float64 `json:"seconds,omitempty"`
	Wait     *float64 `json:"wait_s,omitempty"`
	Elapsed  *float64 `json:"elapsed_s,omitempty"`
	Tokens   int64    `json:"tokens"`
	Attempts *int     `json:"attempts,omitempty"`
	USD      *float64 `json:"usd,omitempty"`
}

func ptr[T any](v T) *T { return &v }

func runAdmit(o *AdmitOptions) error {
	if o.NoRows {
		fmt.Fprintf(o.IO.ErrOut, "no rows for job %q in %s: nothing observed yet (a first attempt)\n", o.Job, logDisplay(o.LogPath))
	}
	// Without --log, the spend and the next attempt are the flags': the
	// gate alone. With it, the job machine decides on the job's books.
	d := admit.Decide(o.Budget, o.Spent, o.Next)
	if o.LogPath != "" {
		var w *admit.BudgetWindow
		if o.HasWindow {
			w = &o.Window
		}
		o.Rules.Budget = o.Budget
		d = o.Books.Next(o.Rules, o.Seat, o.Next, w)
	}
	b, s, n, r := o.Budget, o.Spent, o.Next, d.Remaining
	spend := b.HasSpendCeiling()
	if o.JSON {
		out := admitJSON{
			Decision:  d.String(),
			Admit:     d.Admit,
			Reason:    string(d.Reason),
			Budget:    numbers{Seconds: ptr(b.Deadline.Seconds()), Wait: ptr(b.MaxWait.Seconds()), Tokens: b.TokenCeiling, Attempts: ptr(b.MaxAttempts)},
			Spent:     numbers{Seconds: ptr(s.Time.Seconds()), Tokens: s.Tokens, Attempts: ptr(s.Attempts)},
			Next:      numbers{Wait: ptr(n.Wait.Seconds()), Elapsed: ptr(n.Elapsed().Seconds()), Tokens: n.Tokens},
			Remaining: numbers{Seconds: ptr(r.Time.Seconds()), Tokens: r.Tokens, Attempts: ptr(r.Attempts)},
		}
		for _, f := range d.Failing {
			out.Failing = append(out.Failing, string(f))
		}
		if spend {
			out.Budget.USD, out.Spent.USD, out.Next.USD, out.Remaining.USD = ptr(b.MaxSpendUSD), ptr(s.USD), ptr(n.USD), ptr(r.USD)
		}
		if err := printJSON(o.IO.Out, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(o.IO.Out, d.String())
		if len(d.Failing) > 1 {
			fmt.Fprintf(o.IO.ErrOut, "also failing:")
			for _, f := range d.Failing[1:] {
				fmt.Fprintf(o.IO.ErrOut, " %s;", f)
			}
			fmt.Fprintln(o.IO.ErrOut)
		}
		sec := func(x time.Duration) string { return ledgerfile.FormatSeconds(x) + "s" }
		tok := func(x int64) string { return strconv.FormatInt(x, 10) }
		rows := [][]string{
			{"deadline", sec(b.Deadline), sec(s.Time), "", sec(r.Time)},
			{"wait cap", sec(b.MaxWait), "", sec(n.Wait), ""},
			{"wait + gen", "", "", sec(n.Elapsed()), ""},
			{"tokens", tok(b.TokenCeiling), tok(s.Tokens), tok(n.Tokens), tok(r.Tokens)},
			{"attempts", strconv.Itoa(b.MaxAttempts), strconv.Itoa(s.Attempts), "1", strconv.Itoa(r.Attempts)},
		}
		if spend {
			usd := func(x float64) string { return "$" + strconv.FormatFloat(x, 'f', -1, 64) }
			rows = append(rows, []string{"spend", usd(b.MaxSpendUSD), usd(s.USD), usd(n.USD), usd(r.USD)})
		}
		if err := printTable(o.IO, []string{"", "budget", "spent", "next", "remaining"}, rows); err != nil {
			return err
		}
	}
	if !d.Admit {
		return refused
	}
	return nil
}
