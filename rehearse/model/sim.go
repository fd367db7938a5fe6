package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/script"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// Sim is one what-if run: a policy's fallback chain, each seat playing a
// planner, driven by rehearse's attempt loop on the virtual clock. There
// is no second implementation of the policy here: rows come out of the
// loop and are only counted.
type Sim struct {
	Policy rehearse.Policy
	Seats  []rehearse.SeatSpec // the fallback chain; every seat needs a Planner
	Jobs   int
	Rate   float64 // Poisson arrivals per second; 0 runs jobs one after another
	// Ramp steps through Poisson rates instead of Rate; Duration bounds the
	// run by virtual time (Jobs 0: no bound by count). See rehearse.VirtualOptions.
	Ramp     []rehearse.Step
	Duration time.Duration
	// Rand is the loop's jitter (and arrivals) source; nil seeds one from Seed.
	Rand  *rand.Rand
	Seed  uint64
	Start time.Time
	Ctx   context.Context
	// Progress, if set, is told how many jobs have finished, every few
	// thousand jobs and once at the end.
	Progress func(done int)
	// Rows, if set, also receives every row (reused after it returns).
	Rows func(*ledgerfile.Row)
	// KeepSummary keeps the summary behind the figures in Summary.Source.
	KeepSummary bool
	// Steps > 0 cuts the run into stretches of this length (Summary.Steps):
	// with a ramp, one per rate.
	Steps time.Duration
}

// LoopRand is the jitter source a simulation with seed uses. It is seeded
// exactly as `retrygate rehearse --seed` seeds its loop (cmd/rehearse.go),
// so a script seat simulated and rehearsed with one seed writes the same
// rows.
func LoopRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)) }

// Run simulates s and summarises it.
func Run(s Sim) (*Summary, error) {
	if s.Jobs < 0 || s.Jobs == 0 && s.Duration <= 0 && len(s.Ramp) == 0 {
		return nil, fmt.Errorf("jobs: must be at least 1, got %d", s.Jobs)
	}
	for _, sp := range s.Seats {
		if sp.Planner == nil {
			return nil, fmt.Errorf("seat %q: nothing to play (give it a model or a script)", sp.Config.Name)
		}
	}
	r := s.Rand
	if r == nil {
		r = LoopRand(s.Seed)
	}
	start := s.Start
	if start.IsZero() {
		start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	opts := SummaryOptions(s.Policy, s.Seats)
	opts.OnlyEndToEnd = !s.KeepSummary // the figures read no other distribution
	opts.Steps, opts.StepsFrom = s.Steps, start
	sum := summary.New(opts)
	jobs := 0
	progress, rows := s.Progress, s.Rows
	sink := func(row *ledgerfile.Row) {
		sum.Add(row, "")
		if rows != nil {
			rows(row)
		}
		if row.JobEnd != "" && progress != nil {
			if jobs++; jobs&4095 == 0 {
				progress(jobs)
			}
		}
	}
	l, err := rehearse.New(rehearse.Config{
		Policy: s.Policy, Seats: s.Seats, Rand: r, Sink: sink, Run: 1, Jobs: s.Jobs,
	})
	if err != nil {
		return nil, err
	}
	res, err := l.RunVirtual(rehearse.VirtualOptions{Jobs: s.Jobs, Rate: s.Rate, Ramp: s.Ramp, Duration: s.Duration, Start: start, Ctx: s.Ctx})
	if err != nil {
		return nil, err
	}
	if s.Progress != nil {
		s.Progress(res.Ends.Total())
	}
	end := start.Add(res.Elapsed)
	open := make([]time.Duration, len(s.Seats))
	for i := range s.Seats {
		open[i] = l.Breaker(i).OpenTime(end)
	}
	whole := sum.Close()
	out := View(whole, priced(s.Seats), res.Elapsed, open)
	if s.KeepSummary {
		out.Source = whole
	}
	out.Steps = whole.Steps
	out.Interrupted = res.Interrupted
	out.Rate = s.Rate
	return out, nil
}

// SummaryOptions are the summary a simulation of p on seats keeps: the
// policy's deadline for the deadline-miss rule, and one group per seat
// in chain order. It leaves out the streaming figures (TPOT, output
// TPS, ITL), which no simulation figure reads.
func SummaryOptions(p rehearse.Policy, seats []rehearse.SeatSpec) summary.Options {
	o := summary.Options{By: summary.BySeat, SlowAfter: p.Retry.SlowServerAfter, Deadline: p.Budget.Deadline, KeepOrder: true, NoStream: true, Live: true}
	for _, sp := range seats {
		o.Groups = append(o.Groups, sp.Config.Name)
	}
	return o
}

func priced(seats []rehearse.SeatSpec) bool {
	for _, sp := range seats {
		if sp.Config.Priced() {
			return true
		}
	}
	return false
}

// Summary is what a simulated policy did, per job unless named otherwise:
// a view of the one summary (ledgerfile/summary) that report and check
// compute over a log. Rates are fractions of jobs; durations are
// seconds; a figure with nothing to divide by is null.
type Summary struct {
	Jobs      int `json:"jobs"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Unknown   int `json:"unknown"`
	Cancelled int `json:"cancelled,omitempty"`

	SuccessRate      summary.Figure `json:"success_rate"`
	FailedRate       summary.Figure `json:"failed_rate"`
	UnknownRate      summary.Figure `json:"unknown_rate"`
	RefusedRate      summary.Figure `json:"refused_rate"` // of rows: the share of attempts the policy did not send
	DeadlineMisses   int            `json:"deadline_misses"`
	DeadlineMissRate summary.Figure `json:"deadline_miss_rate"`

	// End to end: job start to its last byte or its refusal, every job.
	E2EP50 summary.Figure `json:"end_to_end_p50_s"`
	E2EP95 summary.Figure `json:"end_to_end_p95_s"`
	E2EP99 summary.Figure `json:"end_to_end_p99_s"`

	Attempts           int            `json:"attempts"`
	AttemptsPerJob     summary.Figure `json:"attempts_per_job"`
	AttemptsPerJobSE   summary.Figure `json:"attempts_per_job_se"`
	Billed             int            `json:"billed_attempts"`
	BilledPerJob       summary.Figure `json:"billed_attempts_per_job"`
	BilledPerJobSE     summary.Figure `json:"billed_attempts_per_job_se"`
	AttemptsPerSuccess summary.Figure `json:"attempts_per_success"`
	// AttemptFailureRate is the share of sent attempts that did not come
	// back ok: the f that layered retries multiply.
	AttemptFailureRate summary.Figure `json:"attempt_failure_rate"`

	Tokens           int64          `json:"tokens"`
	TokensPerJob     summary.Figure `json:"tokens_per_job"`
	TokensPerSuccess summary.Figure `json:"tokens_per_success"`

	// Priced is false when no seat has prices: cost figures are then null.
	Priced         bool           `json:"priced"`
	CostUSD        summary.Figure `json:"cost_usd"`
	CostPerJob     summary.Figure `json:"cost_per_job_usd"`
	CostPerJobSE   summary.Figure `json:"cost_per_job_usd_se"`
	CostPerSuccess summary.Figure `json:"cost_per_success_usd"`
	// RetryTax is the retry tax as report and check define it: the share
	// of tokens spent in attempts that did not produce the kept answer.
	// RetryTaxUSD is the USD of those attempts, RetryTaxUSDShare their
	// share of all USD (priced seats only).
	RetryTax         summary.Figure `json:"retry_tax"`
	RetryTaxUSD      summary.Figure `json:"retry_tax_usd"`
	RetryTaxUSDShare summary.Figure `json:"retry_tax_usd_share"`
	// WastedCalls are sent attempts that failed before their job's last
	// attempt (the wasted-call query).
	WastedCalls  int            `json:"wasted_calls"`
	WastedPerJob summary.Figure `json:"wasted_calls_per_job"`

	BreakerOpenS float64 `json:"breaker_open_s"` // summed over seats
	DurationS    float64 `json:"virtual_duration_s"`
	Rate         float64 `json:"rate,omitempty"`
	Interrupted  bool    `json:"interrupted,omitempty"`

	// Steps are the run's stretches (Sim.Steps): the retry share of the
	// load, goodput and cost over time.
	Steps []summary.Step `json:"steps,omitempty"`

	Outcomes map[string]int `json:"outcomes"`
	Refusals map[string]int `json:"refusals"`
	Seats    []SeatFigures  `json:"seats"`

	// Source is the summary the figures were read from, when Sim.KeepSummary
	// asked for it (simulate --html draws its distributions). Its
	// streaming figures are empty (SummaryOptions).
	Source *summary.Summary `json:"-"`
}

// SeatFigures is one seat's part.
type SeatFigures struct {
	Seat         string  `json:"seat"`
	Attempts     int     `json:"attempts"`
	Successes    int     `json:"successes"`
	Wasted       int     `json:"wasted_calls"`
	BreakerOpenS float64 `json:"breaker_open_s"`
}

// View reads a simulation's figures off the one summary. pricedSeats says
// whether any seat has prices; duration is the run's virtual length;
// breakerOpen is each chain seat's open time, in chain order.
func View(s *summary.Summary, pricedSeats bool, duration time.Duration, breakerOpen []time.Duration) *Summary {
	all, j := s.All, s.Jobs
	out := &Summary{
		Jobs: int(all.Jobs), Succeeded: int(all.Succeeded), Failed: int(all.Failed), Unknown: int(all.Unknown), Cancelled: int(all.Cancelled),
		SuccessRate: all.SuccessRate, FailedRate: all.FailedRate, UnknownRate: all.UnknownRate, RefusedRate: s.RefusedRate,
		DeadlineMisses: int(j.DeadlineMisses), DeadlineMissRate: j.DeadlineMissRate,
		E2EP50: summary.Figure(j.EndToEnd.Percentile(50)), E2EP95: summary.Figure(j.EndToEnd.Percentile(95)),
		E2EP99:   summary.Figure(j.EndToEnd.Percentile(99)),
		Attempts: int(all.Attempts), AttemptsPerJob: j.AttemptsPerJob, AttemptsPerJobSE: j.AttemptsSE,
		Billed: int(all.Billed), BilledPerJob: j.BilledPerJob, BilledPerJobSE: j.BilledSE,
		AttemptsPerSuccess: all.AttemptsPerSuccess, AttemptFailureRate: all.AttemptFailureRate,
		Tokens: all.TokensTotal, TokensPerJob: j.TokensPerJob, TokensPerSuccess: j.TokensPerSuccess,
		Priced:  pricedSeats || all.RetryTax.CostRows > 0,
		CostUSD: all.USDTotal, CostPerJob: j.USDPerJob, CostPerJobSE: j.USDSE, CostPerSuccess: j.USDPerSuccess,
		RetryTax: all.RetryTax.TokensShare, RetryTaxUSD: all.RetryTax.USD, RetryTaxUSDShare: all.RetryTax.USDShare,
		WastedCalls: int(all.WastedCalls), WastedPerJob: j.WastedPerJob,
		DurationS: ledgerfile.Resolution(duration).Seconds(), // milliseconds, as the log writes durations
		Outcomes:  ints(all.Outcomes), Refusals: ints(all.Refusals),
	}
	if !out.Priced {
		out.CostPerJobSE = summary.Figure(math.NaN())
	}
	var open time.Duration
	for i, g := range s.Groups {
		sf := SeatFigures{Seat: g.Key, Attempts: int(g.Attempts), Successes: int(g.Outcomes[string(admit.OK)]), Wasted: int(g.WastedCalls)}
		if i < len(breakerOpen) {
			sf.BreakerOpenS = ledgerfile.Resolution(breakerOpen[i]).Seconds()
			open = admit.AddDuration(open, ledgerfile.Resolution(breakerOpen[i]))
		}
		out.Seats = append(out.Seats, sf)
	}
	out.BreakerOpenS = open.Seconds() // a sum of milliseconds: no float residue
	return out
}

func ints(m map[string]int64) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = int(v)
	}
	return out
}

// Planners builds the fallback chain for a simulation: every seat plays m
// when it is given; otherwise each script seat plays its own script.
func Planners(chain []seat.Config, m Model, seed uint64) ([]rehearse.SeatSpec, error) {
	out := make([]rehearse.SeatSpec, 0, len(chain))
	for i, c := range chain {
		spec := rehearse.SeatSpec{Config: c}
		switch {
		case m != nil:
			spec.Planner = m.Planner(seed, i)
		case c.Kind == "script":
			s, err := script.Open(c.Script)
			if err != nil {
				return nil, err
			}
			spec.Planner = s
			if spec.Config.Model == "" {
				spec.Config.Model = s.Model()
			}
		default:
			return nil, &SeatError{Seat: c.Name, Kind: c.Kind}
		}
		out = append(out, spec)
	}
	return out, nil
}

// SeatError is a seat a simulation cannot play without a model.
type SeatError struct{ Seat, Kind string }

func (e *SeatError) Error() string {
	return fmt.Sprintf("seat %q is a %s seat: a simulation plays a model, not the network", e.Seat, e.Kind)
}
