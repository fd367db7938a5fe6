package cmd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"retrygate/admit"
	"retrygate/ledgerfile/summary"
	"retrygate/rehearse"
	"retrygate/rehearse/model"
	"retrygate/rehearse/seat"
)

// SimulateOptions is one what-if: a policy (and optionally a second one
// to compare), played against a latency model on the virtual clock.
type SimulateOptions struct {
	IO       *IOStreams
	Ctx      context.Context
	Policies []simPolicy // one, or two with --vs
	Model    model.Model // nil: every seat is a script seat playing its own script
	Jobs     int
	Rate     float64 // Poisson arrivals per second; 0 runs jobs one after another
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
the policy would do: how many jobs succeed, fail or end unknown, how long
they take end to end, how many attempts they make and pay for, and what
the retries cost. With --vs, a second policy runs against the same model
and seed, side by side, with the difference: what a change costs before
any traffic pays for it.

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
slow= (how long a slow 5xx takes, 30s). Timeouts come from the policy.

Jobs run one after another unless --rate gives Poisson arrivals (jobs per
second), which is what lets breakers, cooldowns and retry storms show.

Figures: success, failed and unknown rates (unknown: the last attempt
timed out or was billed ambiguous); the deadline-miss rate (jobs that
ended without an answer because the deadline ran out: refused for it, or
cut at its end); end-to-end p50/p95/p99 over every job, from its start
to its last byte or its refusal; attempts and billed attempts per job
(ambiguous attempts counted as billed); tokens and cost per job and per
success (cost needs seat prices, price_in and price_out per million
tokens); the retry tax, as report and check define it (the share of
tokens, and of USD, spent in attempts that did not produce the kept
answer); wasted calls (failed attempts that were not a job's last, seed
000's query); the time breakers were open.

--layers name=attempts,... lists the retry layers around the call,
innermost first (e.g. sdk=2,app=3,queue=3): the worst case is the
product of their attempts, the expected number of provider calls uses
the simulated per-attempt failure rate, and more than one layer that
retries is warned about.` + exitStatus("done", "interrupted (Ctrl-C) before every job ran; the figures cover the jobs that did"),
		Example: `  # seed 002's latency shape against the policy in retrygate.yaml
  retrygate simulate --model "lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100"

  # what does a third attempt cost? same model, same seed, side by side
  retrygate simulate --policy two.yaml --vs three.yaml --jobs 100000 --rate 20 \
    --model "lognormal p50=2.1s p99=14s hang=0.3% 5xx=2%"

  # the same question from last week's rehearsal
  retrygate simulate --policy retrygate.yaml --model log:rehearsal.log:scratch`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if err := opts.fill(f, c); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runSimulate(opts)
		},
	}
	fl := c.Flags()
	fl.String("policy", "", "policy `file` (default: --config, or ./retrygate.yaml, or the built-in defaults)")
	fl.String("vs", "", "a second policy `file` to compare against the first")
	fl.String("model", "", "latency `model` every seat plays (see above)")
	fl.String("jobs", "10000", "how many `jobs` to simulate per policy")
	fl.String("rate", "", "Poisson arrivals, jobs per `second` (default: one job after another)")
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
	n, _, err := countFlag(c, "jobs")
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
	if v, set, err := amountFlag(c, "rate"); err != nil {
		return err
	} else if set {
		if v <= 0 {
			return badInput("--rate: must be a positive number of jobs per second, got %g", v)
		}
		o.Rate = v
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
		if o.Model, err = model.Parse(spec); err != nil {
			return withHint(badInput("--model: %v", err), "see 'retrygate simulate --help' for the model grammar")
		}
	}
	first := fl.Lookup("policy").Value.String()
	if !fl.Changed("policy") {
		first = f.ConfigFile
	} else if strings.TrimSpace(first) == "" {
		return badInput("--policy: empty path")
	}
	p, err := loadSimPolicy(f, c, first)
	if err != nil {
		return err
	}
	o.Policies = []simPolicy{p}
	if fl.Changed("vs") {
		vs := fl.Lookup("vs").Value.String()
		if strings.TrimSpace(vs) == "" {
			return badInput("--vs: empty path")
		}
		q, err := loadSimPolicy(f, c, vs)
		if err != nil {
			return err
		}
		if q.Label == p.Label {
			p.Label, q.Label = p.File, q.File
			o.Policies[0] = p
		}
		o.Policies = append(o.Policies, q)
	}
	for _, sp := range o.Policies {
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
func loadSimPolicy(f *Factory, c *cobra.Command, path string) (simPolicy, error) {
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
	sp := simPolicy{Policy: pol, File: cfg.file}
	switch {
	case cfg.file != "":
		sp.Label = filepath.Base(cfg.file)
	default:
		sp.Label, sp.File = "defaults", ""
	}
	for _, name := range pol.Fallback {
		sp.Chain = append(sp.Chain, seats[name])
	}
	if len(sp.Chain) == 0 {
		// No chain: a lone seat is the chain; no seat at all is one
		// unnamed seat that plays the model.
		switch len(seats) {
		case 0:
			sp.Chain = []seat.Config{{Name: "model"}}
		case 1:
			for _, s := range seats {
				sp.Chain = []seat.Config{s}
			}
		default:
			names := make([]string, 0, len(seats))
			for n := range seats {
				names = append(names, n)
			}
			slices.Sort(names)
			return sp, withHint(badInput("%s: no fallback chain to simulate (seats: %s)", sp.Label, strings.Join(names, ", ")),
				"add fallback: [seat, ...] to the policy")
		}
	}
	sp.Policy.Fallback = nil
	for _, s := range sp.Chain {
		sp.Policy.Fallback = append(sp.Policy.Fallback, s.Name)
	}
	return sp, nil
}

// simJSON is the --json shape.
type simJSON struct {
	Model      string                    `json:"model"`
	Seed       uint64                    `json:"seed"`
	Jobs       int                       `json:"jobs"`
	Rate       float64                   `json:"rate,omitempty"`
	Policies   []policyJSON              `json:"policies"`
	Difference map[string]summary.Figure `json:"difference,omitempty"`
	Layers     *layersJSON               `json:"layers,omitempty"`
}

type policyJSON struct {
	Name string `json:"name"`
	File string `json:"file,omitempty"`
	*model.Summary
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
		sim := model.Sim{Policy: sp.Policy, Seats: specs, Jobs: o.Jobs, Rate: o.Rate, Seed: o.Seed, Ctx: o.Ctx, KeepSummary: o.HTML != ""}
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
		_ = bar.Finish()
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
	metrics := simMetrics()
	if o.HTML != "" {
		if err := writeSimHTML(o, sums, metrics, modelName); err != nil {
			return err
		}
	}
	if o.JSON {
		out := simJSON{Model: modelName, Seed: o.Seed, Jobs: o.Jobs, Rate: o.Rate, Layers: lj}
		for i, s := range sums {
			out.Policies = append(out.Policies, policyJSON{Name: o.Policies[i].Label, File: o.Policies[i].File, Summary: s})
		}
		if len(sums) == 2 {
			out.Difference = map[string]summary.Figure{}
			for _, m := range metrics {
				out.Difference[m.key] = summary.Figure(m.get(sums[1]) - m.get(sums[0]))
			}
		}
		if err := printJSON(o.IO.Out, out); err != nil {
			return err
		}
		return interrupted(sums)
	}

	header := []string{"metric"}
	for i := range sums {
		header = append(header, o.Policies[i].Label)
	}
	if len(sums) == 2 {
		header = append(header, "difference")
	}
	rows := make([][]string, 0, len(metrics))
	for _, m := range metrics {
		if m.priced && !anyPriced(sums) {
			continue
		}
		row := []string{m.name}
		for _, s := range sums {
			row = append(row, m.format(m.get(s), false))
		}
		if len(sums) == 2 {
			a, b := m.get(sums[0]), m.get(sums[1])
			d := m.format(b-a, true)
			if m.kind != 'r' && a != 0 && b != a && finite(a) && finite(b) {
				d += " (" + fmtIncrease(b/a-1) + ")"
			}
			row = append(row, d)
		}
		rows = append(rows, row)
	}
	rate := "one after another"
	if o.Rate > 0 {
		rate = strconv.FormatFloat(o.Rate, 'g', -1, 64) + " jobs/s"
	}
	fmt.Fprintf(o.IO.ErrOut, "simulated %d jobs per policy, %s, seed %d, model %s\n", o.Jobs, rate, o.Seed, modelName)
	if !anyPriced(sums) {
		fmt.Fprintln(o.IO.ErrOut, "retrygate: hint: no seat has prices (price_in, price_out): costs are left out")
	}
	if err := printTable(o.IO, header, rows); err != nil {
		return err
	}
	if lj != nil {
		fmt.Fprintln(o.IO.Out)
		if err := printLayers(o.IO, lj); err != nil {
			return err
		}
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

func anyPriced(sums []*model.Summary) bool {
	for _, s := range sums {
		if s.Priced {
			return true
		}
	}
	return false
}

// simMetric is one row of the table and one key of --json's difference.
type simMetric struct {
	key, name string
	kind      byte // r rate, s seconds, c count per job, u USD, t tokens, n whole number
	priced    bool // only shown when a seat has prices
	get       func(*model.Summary) float64
}

func simMetrics() []simMetric {
	return []simMetric{
		{"success_rate", "success rate", 'r', false, func(s *model.Summary) float64 { return float64(s.SuccessRate) }},
		{"failed_rate", "failed rate", 'r', false, func(s *model.Summary) float64 { return float64(s.FailedRate) }},
		{"unknown_rate", "unknown rate", 'r', false, func(s *model.Summary) float64 { return float64(s.UnknownRate) }},
		{"deadline_miss_rate", "deadline-miss rate", 'r', false, func(s *model.Summary) float64 { return float64(s.DeadlineMissRate) }},
		{"end_to_end_p50_s", "end to end p50", 's', false, func(s *model.Summary) float64 { return float64(s.E2EP50) }},
		{"end_to_end_p95_s", "end to end p95", 's', false, func(s *model.Summary) float64 { return float64(s.E2EP95) }},
		{"end_to_end_p99_s", "end to end p99", 's', false, func(s *model.Summary) float64 { return float64(s.E2EP99) }},
		{"attempts_per_job", "attempts per job", 'c', false, func(s *model.Summary) float64 { return float64(s.AttemptsPerJob) }},
		{"billed_attempts_per_job", "billed attempts per job", 'c', false, func(s *model.Summary) float64 { return float64(s.BilledPerJob) }},
		{"attempts_per_success", "attempts per success", 'c', false, func(s *model.Summary) float64 { return float64(s.AttemptsPerSuccess) }},
		{"attempt_failure_rate", "attempt failure rate", 'r', false, func(s *model.Summary) float64 { return float64(s.AttemptFailureRate) }},
		{"tokens_per_job", "tokens per job", 't', false, func(s *model.Summary) float64 { return float64(s.TokensPerJob) }},
		{"tokens_per_success", "tokens per success", 't', false, func(s *model.Summary) float64 { return float64(s.TokensPerSuccess) }},
		{"cost_per_job_usd", "cost per job", 'u', true, func(s *model.Summary) float64 { return float64(s.CostPerJob) }},
		{"cost_per_success_usd", "cost per success", 'u', true, func(s *model.Summary) float64 { return float64(s.CostPerSuccess) }},
		{"retry_tax", "retry tax (tokens)", 'r', false, func(s *model.Summary) float64 { return float64(s.RetryTax) }},
		{"retry_tax_usd_share", "retry tax (USD)", 'r', true, func(s *model.Summary) float64 { return float64(s.RetryTaxUSDShare) }},
		{"wasted_calls_per_job", "wasted calls per job", 'c', false, func(s *model.Summary) float64 { return float64(s.WastedPerJob) }},
		{"breaker_open_s", "breaker open", 's', false, func(s *model.Summary) float64 { return float64(s.BreakerOpenS) }},
		{"virtual_duration_s", "virtual time", 's', false, func(s *model.Summary) float64 { return float64(s.DurationS) }},
	}
}

func (m simMetric) format(v float64, diff bool) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 0):
		return "∞"
	}
	s := m.formatRaw(v, diff)
	if strings.Trim(s, "+-0.$%sp ") == "" {
		// Rounded to nothing: no sign, so a change too small to show
		// never reads as a loss.
		return m.formatRaw(0, diff)
	}
	return s
}

func (m simMetric) formatRaw(v float64, diff bool) string {
	sign := ""
	if diff && v >= 0 {
		sign = "+"
	}
	switch m.kind {
	case 'r':
		if diff {
			return sign + strconv.FormatFloat(v*100, 'f', 2, 64) + " pp"
		}
		return strconv.FormatFloat(v*100, 'f', 2, 64) + "%"
	case 's':
		return sign + strconv.FormatFloat(v, 'f', 3, 64) + "s"
	case 'c':
		return sign + strconv.FormatFloat(v, 'f', 4, 64)
	case 'u':
		return sign + fmtUSDSig(v, 4)
	case 't':
		return sign + strconv.FormatFloat(v, 'f', 1, 64)
	}
	return sign + strconv.FormatFloat(v, 'f', -1, 64)
}

// parseLayers reads --layers: name=attempts pairs, comma-separated,
// innermost first. Attempts count the first try (1 = no retries).
func parseLayers(s string) ([]admit.Layer, error) {
	var out []admit.Layer
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, val, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, badInput("--layers: %q: want name=attempts (e.g. sdk=2,app=3,queue=3)", part)
		}
		n, err := parseCount(val)
		if err != nil || n < 1 || n > 1000 {
			return nil, badInput("--layers: %q: attempts must be a whole number from 1 to 1000 (1 means the layer does not retry)", part)
		}
		for _, l := range out {
			if l.Name == name {
				return nil, badInput("--layers: layer %q given twice", name)
			}
		}
		out = append(out, admit.Layer{Name: name, Attempts: int(n)})
	}
	return out, nil
}

// layerRate is a per-attempt failure rate to evaluate the layers at.
type layerRate struct {
	Label string  `json:"policy"`
	F     float64 `json:"attempt_failure_rate"`
	Calls float64 `json:"expected_calls"`
}

type layersJSON struct {
	Layers    []layerJSON `json:"layers"`
	WorstCase int64       `json:"worst_case_calls"`
	Expected  []layerRate `json:"expected,omitempty"`
	Owners    []string    `json:"retry_owners"`
}

type layerJSON struct {
	Name     string `json:"name"`
	Attempts int    `json:"attempts"`
}

func layersFigures(ls []admit.Layer, rates []layerRate) *layersJSON {
	out := &layersJSON{WorstCase: admit.LayersWorstCase(ls), Owners: admit.RetryOwners(ls)}
	if out.Owners == nil {
		out.Owners = []string{}
	}
	for _, l := range ls {
		out.Layers = append(out.Layers, layerJSON{Name: l.Name, Attempts: l.Attempts})
	}
	for _, r := range rates {
		r.Calls = admit.LayersExpectedCalls(ls, r.F)
		out.Expected = append(out.Expected, r)
	}
	return out
}

// warnLayers is seed 004's rule: exactly one layer owns the retries.
func warnLayers(io *IOStreams, ls []admit.Layer) {
	if owners := admit.RetryOwners(ls); len(owners) > 1 {
		fmt.Fprintf(io.ErrOut, "retrygate: warning: %d layers retry (%s): one user action can make %d provider calls; give one layer the retry budget and set the others to 1 attempt\n",
			len(owners), strings.Join(owners, ", "), admit.LayersWorstCase(ls))
	}
}

func printLayers(io *IOStreams, lj *layersJSON) error {
	product := make([]string, len(lj.Layers))
	for i, l := range lj.Layers {
		product[i] = fmt.Sprintf("%s=%d", l.Name, l.Attempts)
	}
	rows := [][]string{{"worst case", strings.Join(product, " × "), strconv.FormatInt(lj.WorstCase, 10)}}
	for _, r := range lj.Expected {
		rows = append(rows, []string{"expected", fmt.Sprintf("f=%s (%s)", strings.TrimSuffix(strconv.FormatFloat(r.F*100, 'f', 2, 64), ".00")+"%", r.Label), fmtAttempts(r.Calls)})
	}
	return printTable(io, []string{"provider calls per user action", "layers (innermost first)", "calls"}, rows)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
