package cmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"retrygate/admit"
	"retrygate/ledgerfile/claims"
)

// ClaimOptions reserves one attempt of a job for a shell retry loop.
type ClaimOptions struct {
	IO      *IOStreams
	Now     func() time.Time
	Job     string
	State   string
	Budget  admit.Budget
	Hard    time.Duration
	Done    bool
	Seconds bool
}

func newClaimCmd(f *Factory, runF func(*ClaimOptions) error) *cobra.Command {
	opts := &ClaimOptions{IO: f.IO, Now: f.Now}
	c := &cobra.Command{
		Use:   "claim --job ID",
		Short: "Reserve one attempt of a job and print the milliseconds it may use",
		Long: `Reserve one attempt of a job and print, alone on stdout, the milliseconds
that attempt may use: what is left of the job's deadline, capped by
--hard-timeout. The first claim for a job starts its deadline (seed 000:
a deadline made once, inherited by every attempt); a retry never gets a
fresh timeout, only what survived the attempts before it.

When the attempt cap or the deadline is spent, claim prints
"refuse: attempt cap" or "refuse: deadline" on stderr and exits 1.

State lives in a small JSON file (--state), locked so that two claimers
of the same job never both receive the last attempt. claim --done forgets
a finished job; jobs whose deadline ended a day ago are forgotten on
their own.` + exitStatus("an attempt was reserved (or --done)", "refuse: the attempt cap or the deadline is spent"),
		Example: `  # a retry loop where every attempt inherits what is left of one 45 s deadline
  id=summarize-$RANDOM
  while s=$(retrygate claim --job "$id" --deadline 45s --max-attempts 3 --hard-timeout 20s --seconds); do
    curl -fsS --max-time "$s" -d @request.json http://127.0.0.1:6556/v1/chat/completions && break
  done
  retrygate claim --job "$id" --done`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if err := opts.fill(f, c); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runClaim(opts)
		},
	}
	fl := c.Flags()
	fl.StringVar(&opts.Job, "job", "", "job `id` (required)")
	fl.StringVar(&opts.State, "state", filepath.Join(".retrygate", "claims.json"), "claim state `file`")
	fl.String("deadline", "", "the job's deadline, set by its first claim (default 45s; config budget.deadline)")
	fl.String("max-attempts", "", "attempt cap, set by the job's first claim (default 2; config budget.max_attempts)")
	fl.String("hard-timeout", "", "cap each attempt's time at this `duration`")
	fl.BoolVar(&opts.Done, "done", false, "forget the job: it finished")
	fl.BoolVar(&opts.Seconds, "seconds", false, "print seconds with 3 decimals (for curl --max-time) instead of milliseconds")
	return c
}

func (o *ClaimOptions) fill(f *Factory, c *cobra.Command) error {
	if strings.TrimSpace(o.Job) == "" {
		return badInput("--job: required")
	}
	if strings.TrimSpace(o.State) == "" {
		return badInput("--state: empty path")
	}
	if st, err := os.Stat(o.State); err == nil && st.IsDir() {
		return badInput("--state %q: is a directory", o.State)
	}
	cfg, err := loadConfig(f, c, map[string]string{"budget.deadline": "deadline", "budget.max_attempts": "max-attempts"})
	if err != nil {
		return err
	}
	if o.Budget, err = cfg.budget(); err != nil {
		return err
	}
	if o.Hard, _, err = durFlag(c, "hard-timeout"); err != nil {
		return err
	}
	if c.Flags().Changed("hard-timeout") && o.Hard <= 0 {
		return badInput("--hard-timeout: must be positive")
	}
	return nil
}

func runClaim(o *ClaimOptions) error {
	if isDBLog(o.State) {
		return runClaimStore(o)
	}
	var g claims.Grant
	err := claims.Update(o.State, func(s *claims.State) error {
		now := o.Now()
		claims.Tidy(s, now)
		if o.Done {
			delete(s.Jobs, o.Job)
			return nil
		}
		g = claims.Claim(s, o.Job, o.Budget, o.Hard, now)
		return nil
	})
	if err != nil {
		return badInputErr(err)
	}
	if o.Done {
		return nil
	}
	if !g.Decision.Admit {
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
