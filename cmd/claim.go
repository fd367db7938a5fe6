package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile/store"
)

// ClaimOptions reserves one attempt of a job for a shell retry loop.
type ClaimOptions struct {
	IO      *IOStreams
	Ctx     context.Context
	Clock   store.Clock // the wall clock, the boot-time clock and the boot id
	Job     string
	State   string
	Budget  admit.Budget
	Hard    time.Duration
	Done    bool
	Seconds bool
}

func newClaimCmd(f *Factory, runF func(*ClaimOptions) error) *cobra.Command {
	opts := &ClaimOptions{IO: f.IO, Ctx: f.Ctx, Clock: store.SystemClock}
	var claimKeys map[string]string
	c := &cobra.Command{
		Use:   "claim --job ID",
		Short: "Reserve one attempt of a job and print the milliseconds it may use",
		Long: `Reserve one attempt of a job and print, alone on stdout, the milliseconds
that attempt may use: what is left of the job's deadline, capped by
--hard-timeout.

The first claim for a job starts its deadline (a deadline made once,
inherited by every attempt); a retry never gets a fresh timeout, only
what survived the attempts before it.

When the job's budget is spent, claim prints the gate's refusal on
stderr ("refuse: attempt cap", "refuse: deadline", ...) and exits 1.

The decision is the job machine's, as admit's, rehearse's and the
proxy's are: the gate (the same checks, order and words as admit) on
the job's spend, each attempt granted and not yet recorded counted as
used. A file knows only the attempts and the deadline; in PostgreSQL
the rows recorded for the job's attempts (record --log with the same
URL, the same job id) settle their tokens and spend, so the token and
spend ceilings hold too, and an attempt whose timeout passed with no row
counts as spent.

A job's books live at --state: one file, or a postgres:// URL, where
the proxies that share that database keep their jobs' books too (under
their own keys: a claim and a proxy request of one job id are two
budgets). In a file, time is measured on the machine's boot-time clock,
which setting the wall clock back or forward does not move: a clock set
back gives a job no time back, and a clock set forward forgets nothing.
After a reboot, or when the file is shared by machines, the time since
the last claim is measured on the wall clock instead, and a wall clock
that went back counts as no time passed.

The file is locked itself, so that two claimers never both receive the
last attempt. A cleanup that deletes it (or its directory) mid-run
cannot make two claimers grant from one state: each checks, after
locking and after writing, that the file it holds is still the one at
the path, and a claimer that held the deleted file carries its jobs
into the new one. A file deleted while no claimer holds it forgets its
jobs, as claim --done forgets one. Jobs whose deadline ended a day ago
are forgotten on their own (PostgreSQL keeps them until --done).` + exitStatus("an attempt was reserved (or --done)", "refuse: the job's budget is spent (the reason is on stderr)"),
		Example: `  # a retry loop where every attempt inherits what is left of one 45 s deadline
  id=summarize-$RANDOM
  while s=$(retrygate claim --job "$id" --deadline 45s --max-attempts 3 --hard-timeout 20s --seconds); do
    curl -fsS --max-time "$s" -d @request.json http://127.0.0.1:6556/v1/chat/completions && break
  done
  retrygate claim --job "$id" --done`,
		Args: cobra.NoArgs,
		RunE: runE(opts, func(c *cobra.Command, _ []string) error { return opts.fill(f, c, claimKeys) }, runF, runClaim),
	}
	fl := c.Flags()
	fl.StringVar(&opts.Job, "job", "", "job `id` (required)")
	fl.StringVar(&opts.State, "state", filepath.Join(".retrygate", "claims.json"), "where the jobs' books live: a `file`, or a postgres:// URL")
	claimKeys = mergeFlags(keyFlag(c, "budget.deadline", "the job's deadline, set by its first claim"),
		keyFlag(c, "budget.max_attempts", "attempt cap, set by the job's first claim"))
	fl.String("hard-timeout", "", "cap each attempt's time at this `duration`")
	fl.BoolVar(&opts.Done, "done", false, "forget the job: it finished")
	fl.BoolVar(&opts.Seconds, "seconds", false, "print seconds with 3 decimals (for curl --max-time) instead of milliseconds")
	return c
}

func (o *ClaimOptions) fill(f *Factory, c *cobra.Command, claimKeys map[string]string) error {
	if strings.TrimSpace(o.Job) == "" {
		return badInput("--job: required")
	}
	if strings.TrimSpace(o.State) == "" {
		return badInput("--state: empty path")
	}
	if st, err := os.Stat(o.State); err == nil && st.IsDir() {
		return badInput("--state %q: is a directory", o.State)
	}
	cfg, err := loadConfig(f, c, claimKeys)
	if err != nil {
		return err
	}
	if o.Budget, err = cfg.budget(); err != nil {
		return err
	}
	if o.Hard, _, err = flagValue(c, "hard-timeout", admit.ParseDuration); err != nil {
		return err
	}
	if c.Flags().Changed("hard-timeout") && o.Hard <= 0 {
		return badInput("--hard-timeout: must be positive")
	}
	return nil
}

// runClaim claims on the books at --state, a file or a database: the
// job machine decides on both (store.Claims).
func runClaim(o *ClaimOptions) error {
	ctx := o.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	cs, closer, err := openClaims(ctx, o.State, o.Clock)
	if err != nil {
		return err
	}
	if closer != nil {
		defer closer.Close()
	}
	var g store.Grant
	if o.Done {
		err = cs.Done(ctx, o.Job)
	} else {
		g, err = cs.Claim(ctx, store.Request{Job: o.Job, Budget: o.Budget, Hard: o.Hard})
	}
	switch {
	case errors.Is(err, context.Canceled):
		return &exitError{Code: ExitRefuse, Err: fmt.Errorf("interrupted while waiting for the claim state %q: no attempt was reserved", logDisplay(o.State))}
	case err != nil && isDBLog(o.State):
		return withHint(badInputErr(err), dbHint)
	case err != nil:
		return badInputErr(err)
	case o.Done:
		return nil
	case !g.Decision.Admit:
		fmt.Fprintln(o.IO.ErrOut, g.Decision.String())
		return refused
	}
	ms := g.Timeout.Milliseconds()
	if o.Seconds {
		fmt.Fprintf(o.IO.Out, "%d.%03d\n", ms/1000, ms%1000)
	} else {
		fmt.Fprintln(o.IO.Out, ms)
	}
	return nil
}
