package cmd

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/model"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// SimulateOptions is one what-if: a policy (and optionally a second one
// to compare), played against a latency model on the virtual clock.
type SimulateOptions struct {
	IO       *IOStreams
	Ctx      context.Context
	Policies []simPolicy // one, or two with --vs
	Model    model.Model // nil: every seat is a script seat playing its own script
	Jobs     int
	Rate     float64         // Poisson arrivals per second; 0 runs jobs one after another
	Ramp     []rehearse.Step // --ramp: rates stepped through instead of Rate
	Duration time.Duration   // --duration: bound by virtual time (Jobs 0: by time alone)
	Seed     uint64
	JSON     bool
	Layers   []admit.Layer
	Progress bool   // draw a progress bar on stderr
	HTML     string // --html: a page of the policies' distributions and costs on the same axes (simulate_html.go)
}

// simPolicy is a policy file, resolved.
type simPolicy struct {
	Label  string // what the table calls it
	File   string // "" for the built-in defaults
	Policy rehearse.Policy
	Chain  []seat.Config // the fallback chain, in order
}

func newSimulateCmd(f *Factory, runF func(*SimulateOptions) error) *cobra.Command {
	opts := &SimulateOptions{IO: f.IO}
	c := &cobra.Command{
		Use:   "simulate --model MODEL [--policy FILE] [--vs FILE]",
		Short: "Play a policy against a latency model on the virtual clock: what would it cost?",
		Long: `Run a policy's attempt loop — the same one 'retrygate rehearse' runs —
against a latency model on the virtual clock, for many jobs, and say what
it would cost before any traffic pays for it.

The table says how many jobs succeed, fail or end unknown, how long they
take end to end, how many attempts they make and pay for, and what the
retries cost. With --vs, a second policy runs against the same model and
seed, side by side, with the difference.

Every seat of the policy's fallback chain plays --model. Without --model,
each seat must be a script seat, and plays its own script. A model is:

  lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100
  fixed elapsed=2s 5xx=5%
  log:FILE[:SEAT]     every call replays an attempt drawn from a rehearsal.log
  script:FILE         a script seat's steps, in order

Parametric terms: p50= with one of p90= p95= p99= p999= (lognormal), or
elapsed= (fixed); ttft= (a duration, or a share of elapsed; default 25%);
tokens= (prompt + completion) or rate= (completion tokens per second of
stream); prompt=; failure shares hang= conn= 429= 5xx= slow5xx= 4xx=
reset=; retry_after= (on 429s), fast= (how long 429/5xx/4xx take, 200ms),
slow= (how long a slow 5xx takes, 30s); slots=N (the seat serves N calls
at once: past them an answer's wait and elapsed stretch by calls in
flight ÷ N, so latency rises with load). Timeouts come from the policy.

Jobs run one after another unless --rate gives Poisson arrivals (jobs per
second), which is what lets breakers, cooldowns and retry storms show.
With --ramp, a second table gives each step's retry share of the sent
attempts, goodput (ok answers per second) and cost, per policy.

Figures: success, failed and unknown rates (unknown: the last attempt
timed out or was billed ambiguous); the deadline-miss rate (jobs that
the policy stops for its deadline: refused for it, or a timeout cut at
the end of what was left of it); end-to-end p50/p95/p99 over every
job, from its start to its last byte or its refusal; attempts and billed attempts per job
(ambiguous attempts counted as billed); tokens and cost per job and per
success (cost needs seat prices, price_in and price_out per million
tokens); the retry tax, as report and check define it (the share of
tokens, and of USD, spent in attempts that did not produce the kept
answer); wasted calls (failed attempts that were not a job's last);
the time breakers were open. Every figure comes from the same summary
report and check compute over a log: simulate a policy, rehearse it,
and check the log, and the deadline-miss, unknown and refused rates
and attempts per success agree.

--layers name=attempts,... lists the retry layers around the call,
innermost first (e.g. sdk=2,app=3,queue=3): the worst case is the
product of their attempts, the expected number of provider calls uses
the simulated per-attempt failure rate, and more than one layer that
retries is warned about.` + exitStatus("done", "interrupted (Ctrl-C) before every job ran; the figures cover the jobs that did"),
		Example: `  # a long-tailed provider (p50 2.1s, p99 14s, 0.3% hangs) against retrygate.yaml
  retrygate simulate --model "lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100"

  # what does a third attempt cost? same model, same seed, side by side
  retrygate simulate --policy two.yaml --vs three.yaml --jobs 100000 --rate 20 \
    --model "lognormal p50=2.1s p99=14s hang=0.3% 5xx=2%"

  # the same question from last week's rehearsal
  retrygate simulate --policy retrygate.yaml --model log:rehearsal.log:scratch`,
		Args: cobra.NoArgs,
		RunE: runE(opts, func(c *cobra.Command, _ []string) error { return opts.fill(f, c) }, runF, runSimulate),
	}
	fl := c.Flags()
	fl.String("policy", "", "policy `file` (default: --config, or ./retrygate.yaml, or the built-in defaults)")
	fl.String("vs", "", "a second policy `file` to compare against the first")
	fl.String("model", "", "latency `model` every seat plays (see above)")
	fl.String("route", "", "simulate the chain the policy's routes give jobs naming this `model`")
	fl.String("jobs", "10000", "how many `jobs` to simulate per policy")
	fl.String("rate", "", "Poisson arrivals, jobs per `second` (default: one job after another)")
	addLoadFlags(fl, false)
	fl.String("seed", "1", "random `seed`: the same seed gives the same result")
	fl.String("layers", "", "retry layers innermost first, `name=attempts,...` (e.g. sdk=2,app=3,queue=3)")
	fl.BoolVar(&opts.JSON, "json", false, "print JSON")
	fl.StringVar(&opts.HTML, "html", "", "also write a page of the policies' distributions and costs on the same axes to `FILE`")
	return c
}

func (o *SimulateOptions) fill(f *Factory, c *cobra.Command) error {
	o.Ctx = f.Ctx
	if err := checkHTMLFlag(c, o.HTML); err != nil {
		return err
	}
	fl := c.Flags()
	n, _, err := flagValue(c, "jobs", admit.ParseCount)
	if err != nil {
		return err
	}
	if !fl.Changed("jobs") {
		n = 10000
	}
	if n < 1 || n > 100_000_000 {
		return badInput("--jobs: must be between 1 and 100000000, got %d", n)
	}
	o.Jobs = int(n)
	load, err := parseLoadFlags(c)
	if err != nil {
		return err
	}
	o.Rate, o.Ramp, o.Duration = load.Rate, load.Ramp, load.Duration
	if load.timed() && !fl.Changed("jobs") {
		o.Jobs = 0 // bounded by time alone
	}
	seed := fl.Lookup("seed").Value.String()
	if o.Seed, err = strconv.ParseUint(strings.TrimSpace(seed), 10, 64); err != nil {
		return badInput("--seed: not a whole number %q", seed)
	}
	if s := fl.Lookup("layers"); s.Changed {
		if o.Layers, err = parseLayers(s.Value.String()); err != nil {
			return err
		}
	}
	if spec := fl.Lookup("model").Value.String(); fl.Changed("model") {
		if strings.TrimSpace(spec) == "" {
			return badInput("--model: empty (want e.g. \"lognormal p50=2.1s p99=14s\", log:FILE or script:FILE)")
		}
		if o.Model, err = parseModel(f.Ctx, spec); err != nil {
			return withHint(badInput("--model: %v", err), "see 'retrygate simulate --help' for the model grammar")
		}
	}
	if fl.Changed("route") && strings.TrimSpace(fl.Lookup("route").Value.String()) == "" {
		return badInput("--route: empty model name")
	}
	o.Policies = nil
	for _, name := range []string{"policy", "vs"} {
		path := fl.Lookup(name).Value.String()
		switch {
		case name == "policy" && !fl.Changed(name):
			path = f.ConfigFile
		case !fl.Changed(name):
			continue
		case strings.TrimSpace(path) == "":
			return badInput("--%s: empty path", name)
		}
		p, err := loadSimPolicy(f, c, path, fl.Lookup("route").Value.String())
		if err != nil {
			return err
		}
		o.Policies = append(o.Policies, p)
	}
	if p := o.Policies; len(p) == 2 && p[0].Label == p[1].Label {
		p[0].Label, p[1].Label = p[0].File, p[1].File
	}
	for _, sp := range o.Policies {
		if o.Model == nil && sp.File == "" {
			// The built-in defaults name no seat with a script to play.
			return withHint(badInput("--model: required without a config: no seat has a script to play"),
				`pass a latency model, e.g. --model "lognormal p50=2.1s p99=14s hang=0.3%", or --model script:FILE; or --policy FILE whose seats are script seats`)
		}
		if _, err := model.Planners(sp.Chain, o.Model, o.Seed); err != nil {
			var se *model.SeatError
			if errors.As(err, &se) {
				return withHint(badInput("%s: %v", sp.Label, err), "give --model to play every seat with a latency model")
			}
			return badInput("%s: %v", sp.Label, err)
		}
	}
	o.Progress = f.IO.ErrTTY && o.Jobs*len(o.Policies) >= 50_000
	return nil
}

// loadSimPolicy reads a policy file through the config loader, exactly as
// rehearse reads it (viper binds no flags here: the file and the
// environment are the policy).
func loadSimPolicy(f *Factory, c *cobra.Command, path, route string) (simPolicy, error) {
	saved := f.ConfigFile
	f.ConfigFile = path
	defer func() { f.ConfigFile = saved }()
	cfg, err := loadConfig(f, c, nil)
	if err != nil {
		return simPolicy{}, err
	}
	pol, seats, err := cfg.policy()
	if err != nil {
		return simPolicy{}, err
	}
	sp := simPolicy{Policy: pol, File: cfg.file, Label: "defaults"}
	if cfg.file != "" {
		sp.Label = filepath.Base(cfg.file)
	}
	for _, name := range pol.ChainFor(route) {
		sp.Chain = append(sp.Chain, seats[name])
	}
	// policy() made a lone seat its own chain; many seats need one named.
	switch {
	case len(sp.Chain) == 0 && len(seats) > 0:
		return sp, withHint(badInput("%s: no fallback chain to simulate (%s)", sp.Label, seatList(seats)),
			"add fallback: [seat, ...] to the policy")
	case len(sp.Chain) == 0:
		// No seat at all: one unnamed seat plays the model.
		sp.Chain = []seat.Config{{Name: "model"}}
		sp.Policy.Fallback = []string{"model"}
	}
	return sp, nil
}

func runSimulate(o *SimulateOptions) error {
	var bar *progressbar.ProgressBar
	if o.Progress {
		bar = progressbar.NewOptions(o.Jobs*len(o.Policies),
			progressbar.OptionSetWriter(o.IO.ErrOut), progressbar.OptionSetDescription("simulating"),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionShowCount(),
			progressbar.OptionClearOnFinish())
	}
	var sums []*model.Summary
	for i, sp := range o.Policies {
		specs, err := model.Planners(sp.Chain, o.Model, o.Seed)
		if err != nil {
			return badInput("%s: %v", sp.Label, err)
		}
		sim := model.Sim{Policy: sp.Policy, Seats: specs, Jobs: o.Jobs, Rate: o.Rate, Ramp: o.Ramp, Duration: o.Duration, Seed: o.Seed, Ctx: o.Ctx, KeepSummary: o.HTML != ""}
		if len(o.Ramp) > 0 {
			sim.Steps = o.Ramp[0].For // --ramp-step: one stretch per rate
		}
		if bar != nil {
			offset := i * o.Jobs
			sim.Progress = func(done int) { _ = bar.Set(offset + done) }
		}
		s, err := model.Run(sim)
		if err != nil {
			return badInput("%s: %v", sp.Label, err)
		}
		sums = append(sums, s)
		if s.Interrupted {
			break
		}
	}
	if bar != nil {
		if interrupted(sums) != nil {
			_ = bar.Clear() // a full bar would say every job ran
			_ = bar.Exit()
		} else {
			_ = bar.Finish()
		}
	}
	for i, s := range sums {
		sp := o.Policies[i]
		if s.Interrupted {
			fmt.Fprintf(o.IO.ErrOut, "retrygate: warning: %s: interrupted after %d of %d jobs; the figures cover those\n", sp.Label, s.Jobs, o.Jobs)
		}
		if o.Rate == 0 && s.Refusals[string(admit.ReasonBreakerOpen)] > 0 {
			fmt.Fprintf(o.IO.ErrOut, "retrygate: warning: %s: %d jobs refused by an open breaker; with jobs one after another a refusal takes no time, so the cooldown never passes: give --rate for arrivals in time\n",
				sp.Label, s.Refusals[string(admit.ReasonBreakerOpen)])
		}
	}

	var lj *layersJSON
	if len(o.Layers) > 0 {
		rates := make([]layerRate, len(sums))
		for i, s := range sums {
			rates[i] = layerRate{Label: o.Policies[i].Label, F: float64(s.AttemptFailureRate)}
		}
		lj = layersFigures(o.Layers, rates)
		warnLayers(o.IO, o.Layers)
	}
	modelName := "scripts"
	if o.Model != nil {
		modelName = o.Model.String()
	}
	if o.HTML != "" {
		if err := writeSimHTML(o, sums, modelName); err != nil {
			return err
		}
	}
	print := printSimulate
	if o.JSON {
		print = printSimulateJSON
	}
	if err := print(o, sums, lj, modelName); err != nil {
		return err
	}
	return interrupted(sums)
}

// interrupted is exit 1 after a Ctrl-C, as rehearse's; the figures so far
// are printed first.
func interrupted(sums []*model.Summary) error {
	for _, s := range sums {
		if s.Interrupted {
			return &exitError{Code: ExitRefuse}
		}
	}
	return nil
}
