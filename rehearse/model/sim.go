package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"retrygate/admit"
	"retrygate/ledgerfile"
	"retrygate/rehearse"
	"retrygate/rehearse/seat"
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
}

// LoopRand is the jitter source a simulation with seed uses. It is seeded
// exactly as `retrygate rehearse --seed` seeds its loop (cmd/rehearse.go),
// so a script seat simulated and rehearsed with one seed writes the same
// rows.
func LoopRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)) }

// Run simulates s and summarises it.
func Run(s Sim) (*Summary, error) {
	if s.Jobs <= 0 {
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
	agg := NewAggregator(s.Policy, s.Seats)
	agg.Reserve(s.Jobs)
	sink := agg.Add
	if s.Progress != nil || s.Rows != nil {
		progress, rows := s.Progress, s.Rows
		sink = func(row *ledgerfile.Row) {
			agg.Add(row)
			if rows != nil {
				rows(row)
			}
			if progress != nil && row.JobEnd != "" && agg.jobs&4095 == 0 {
				progress(agg.jobs)
			}
		}
	}
	l, err := rehearse.New(rehearse.Config{
		Policy: s.Policy, Seats: s.Seats, Rand: r, Sink: sink, Run: 1, Jobs: s.Jobs,
	})
	if err != nil {
		return nil, err
	}
	res, err := l.RunVirtual(rehearse.VirtualOptions{Jobs: s.Jobs, Rate: s.Rate, Start: start, Ctx: s.Ctx})
	if err != nil {
		return nil, err
	}
	if s.Progress != nil {
		s.Progress(agg.jobs)
	}
	end := start.Add(res.Elapsed)
	open := make([]time.Duration, len(s.Seats))
	for i := range s.Seats {
		open[i] = l.Breaker(i).OpenTime(end)
	}
	sum := agg.Summary(res.Elapsed, open)
	sum.Interrupted = res.Interrupted
	sum.Rate = s.Rate
	return sum, nil
}

// Summary is what a simulated policy did, per job unless named otherwise.
// Rates are fractions of jobs; durations are seconds.
type Summary struct {
	Jobs      int `json:"jobs"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Unknown   int `json:"unknown"`
	Cancelled int `json:"cancelled,omitempty"`

	SuccessRate      float64 `json:"success_rate"`
	FailedRate       float64 `json:"failed_rate"`
	UnknownRate      float64 `json:"unknown_rate"`
	DeadlineMisses   int     `json:"deadline_misses"`
	DeadlineMissRate float64 `json:"deadline_miss_rate"`

	// End to end: job start to its last byte or its refusal, every job.
	E2EP50 float64 `json:"end_to_end_p50_s"`
	E2EP95 float64 `json:"end_to_end_p95_s"`
	E2EP99 float64 `json:"end_to_end_p99_s"`

	Attempts           int     `json:"attempts"`
	AttemptsPerJob     float64 `json:"attempts_per_job"`
	AttemptsPerJobSE   float64 `json:"attempts_per_job_se"`
	Billed             int     `json:"billed_attempts"`
	BilledPerJob       float64 `json:"billed_attempts_per_job"`
	BilledPerJobSE     float64 `json:"billed_attempts_per_job_se"`
	AttemptsPerSuccess float64 `json:"attempts_per_success"`
	// AttemptFailureRate is the share of sent attempts that did not come
	// back ok: the f that layered retries multiply.
	AttemptFailureRate float64 `json:"attempt_failure_rate"`

	Tokens           int64   `json:"tokens"`
	TokensPerJob     float64 `json:"tokens_per_job"`
	TokensPerSuccess float64 `json:"tokens_per_success"`

	// Priced is false when no seat has prices: cost figures are then 0.
	Priced         bool    `json:"priced"`
	CostUSD        float64 `json:"cost_usd"`
	CostPerJob     float64 `json:"cost_per_job_usd"`
	CostPerJobSE   float64 `json:"cost_per_job_usd_se"`
	CostPerSuccess float64 `json:"cost_per_success_usd"`
	// RetryTax is seed 004's retry tax as `report` and `check` define it:
	// the share of tokens spent in attempts that did not produce the kept
	// answer. RetryTaxUSD is the USD of those attempts, RetryTaxUSDShare
	// their share of all USD (priced seats only).
	RetryTax         float64 `json:"retry_tax"`
	RetryTaxUSD      float64 `json:"retry_tax_usd"`
	RetryTaxUSDShare float64 `json:"retry_tax_usd_share"`
	// WastedCalls are sent attempts that failed and were not a job's last
	// row (seed 000's wasted-call query).
	WastedCalls  int     `json:"wasted_calls"`
	WastedPerJob float64 `json:"wasted_calls_per_job"`

	BreakerOpenS float64 `json:"breaker_open_s"` // summed over seats
	DurationS    float64 `json:"virtual_duration_s"`
	Rate         float64 `json:"rate,omitempty"`
	Interrupted  bool    `json:"interrupted,omitempty"`

	Outcomes map[string]int `json:"outcomes"`
	Refusals map[string]int `json:"refusals"`
	Seats    []SeatFigures  `json:"seats"`
}

// SeatFigures is one seat's part.
type SeatFigures struct {
	Seat         string  `json:"seat"`
	Attempts     int     `json:"attempts"`
	Successes    int     `json:"successes"`
	Wasted       int     `json:"wasted_calls"`
	BreakerOpenS float64 `json:"breaker_open_s"`
}

// Aggregator counts rows as the loop writes them (or as a log is read),
// never keeping them: a million jobs cost a float per job for the
// percentiles and a little per job in flight.
type Aggregator struct {
	deadline time.Duration
	seats    []SeatFigures

	open    map[string]*jobAcc
	cur     *jobAcc // the last job seen: the only one in flight when jobs run in turn
	free    []*jobAcc
	e2e     []float64
	jobs    int
	ends    [4]int // succeeded, failed, unknown, cancelled
	misses  int
	sent    int
	billed  int
	failed  int
	wasted  int
	tokens  int64
	keptTok int64
	cost    float64
	kept    float64
	priced  bool
	sq      [3]float64 // Σ per-job attempts², billed², cost²
	outcome [9]int
	refused map[string]int
}

type jobAcc struct {
	id                string
	start, end        time.Time
	attempts, billed  int
	cost              float64
	lastReason        string
	lastDeadlineNoted bool
}

// NewAggregator counts rows for a chain. Seats not in it are added as they appear.
func NewAggregator(p rehearse.Policy, seats []rehearse.SeatSpec) *Aggregator {
	a := &Aggregator{deadline: p.Budget.Deadline, open: map[string]*jobAcc{}, refused: map[string]int{}}
	for _, s := range seats {
		a.seats = append(a.seats, SeatFigures{Seat: s.Config.Name})
		if _, ok := s.Config.Cost(0, 0); ok {
			a.priced = true
		}
	}
	return a
}

// Reserve makes room for n jobs' latencies up front.
func (a *Aggregator) Reserve(n int) { a.e2e = slices.Grow(a.e2e, n) }

func (a *Aggregator) job(id string) *jobAcc {
	if a.cur != nil && a.cur.id == id {
		return a.cur
	}
	j := a.open[id]
	if j == nil {
		if n := len(a.free); n > 0 {
			j, a.free = a.free[n-1], a.free[:n-1]
			*j = jobAcc{}
		} else {
			j = new(jobAcc)
		}
		j.id = id
		a.open[id] = j
	}
	a.cur = j
	return j
}

func (a *Aggregator) seat(name string) *SeatFigures {
	for i := range a.seats {
		if a.seats[i].Seat == name {
			return &a.seats[i]
		}
	}
	a.seats = append(a.seats, SeatFigures{Seat: name})
	return &a.seats[len(a.seats)-1]
}

// Add counts one row.
func (a *Aggregator) Add(r *ledgerfile.Row) {
	j := a.job(r.Job)
	if j.start.IsZero() {
		j.start = r.TS
	}
	st := a.seat(r.Seat)
	j.end = r.TS
	if r.Unsent {
		reason := r.Reason()
		a.refused[reason]++
		j.lastReason = reason
		j.lastDeadlineNoted = strings.Contains(r.Note, string(admit.ReasonDeadline))
	} else {
		j.end = r.TS.Add(r.Elapsed)
		j.lastReason = ""
		a.sent++
		st.Attempts++
		j.attempts++
		a.outcome[outcomeIndex(r.Outcome)]++
		if r.Billing.Billed() {
			a.billed++
			j.billed++
		}
		a.tokens += r.Tokens
		if r.HasCost {
			a.cost += r.CostUSD
			j.cost += r.CostUSD
			a.priced = true
		}
		switch {
		case r.Outcome == admit.OK:
			st.Successes++
			a.kept += r.CostUSD
			a.keptTok += r.Tokens
		case r.Outcome != admit.Cancelled:
			a.failed++
			if r.JobEnd == "" {
				a.wasted++
				st.Wasted++
			}
		}
	}
	if r.JobEnd == "" {
		return
	}
	a.jobs++
	lat := j.end.Sub(j.start)
	a.e2e = append(a.e2e, lat.Seconds())
	switch r.JobEnd {
	case ledgerfile.JobSucceeded:
		a.ends[0]++
	case ledgerfile.JobUnknown:
		a.ends[2]++
	case ledgerfile.JobCancelled:
		a.ends[3]++
	default:
		a.ends[1]++
	}
	if r.JobEnd != ledgerfile.JobSucceeded && r.JobEnd != ledgerfile.JobCancelled &&
		(j.lastReason == string(admit.ReasonDeadline) || j.lastDeadlineNoted || (a.deadline > 0 && lat >= a.deadline)) {
		a.misses++
	}
	a.sq[0] += float64(j.attempts * j.attempts)
	a.sq[1] += float64(j.billed * j.billed)
	a.sq[2] += j.cost * j.cost
	delete(a.open, j.id)
	a.free = append(a.free, j)
	a.cur = nil
}

func outcomeIndex(o admit.Outcome) int {
	for i, x := range admit.Outcomes {
		if x == o {
			return i
		}
	}
	return len(admit.Outcomes) - 1 // unknown outcomes are counted with cancelled
}

// Summary computes the figures. duration is the run's virtual length;
// breakerOpen is each chain seat's open time, in chain order.
func (a *Aggregator) Summary(duration time.Duration, breakerOpen []time.Duration) *Summary {
	n := float64(a.jobs)
	s := &Summary{
		Jobs: a.jobs, Succeeded: a.ends[0], Failed: a.ends[1], Unknown: a.ends[2], Cancelled: a.ends[3],
		DeadlineMisses: a.misses, Attempts: a.sent, Billed: a.billed, Tokens: a.tokens,
		Priced: a.priced, CostUSD: a.cost, WastedCalls: a.wasted,
		DurationS: duration.Seconds(),
		Outcomes:  map[string]int{}, Refusals: a.refused,
	}
	for i, c := range a.outcome {
		if c > 0 {
			s.Outcomes[string(admit.Outcomes[i])] = c
		}
	}
	s.Seats = slices.Clone(a.seats)
	for i, d := range breakerOpen {
		if i < len(s.Seats) {
			s.Seats[i].BreakerOpenS = d.Seconds()
			s.BreakerOpenS += d.Seconds()
		}
	}
	if a.jobs == 0 {
		return s
	}
	s.SuccessRate = float64(s.Succeeded) / n
	s.FailedRate = float64(s.Failed) / n
	s.UnknownRate = float64(s.Unknown) / n
	s.DeadlineMissRate = float64(s.DeadlineMisses) / n
	slices.Sort(a.e2e)
	s.E2EP50, s.E2EP95, s.E2EP99 = admit.Percentile(a.e2e, 50), admit.Percentile(a.e2e, 95), admit.Percentile(a.e2e, 99)

	mean := func(total float64) float64 { return total / n }
	se := func(total, sq float64) float64 {
		if a.jobs < 2 {
			return 0
		}
		m := total / n
		v := (sq - n*m*m) / (n - 1)
		return math.Sqrt(max(v, 0) / n)
	}
	s.AttemptsPerJob, s.AttemptsPerJobSE = mean(float64(a.sent)), se(float64(a.sent), a.sq[0])
	s.BilledPerJob, s.BilledPerJobSE = mean(float64(a.billed)), se(float64(a.billed), a.sq[1])
	s.TokensPerJob = mean(float64(a.tokens))
	s.CostPerJob, s.CostPerJobSE = mean(a.cost), se(a.cost, a.sq[2])
	s.WastedPerJob = mean(float64(a.wasted))
	if a.sent > 0 {
		s.AttemptFailureRate = float64(a.failed) / float64(a.sent)
	}
	if s.Succeeded > 0 {
		ns := float64(s.Succeeded)
		s.AttemptsPerSuccess = float64(a.sent) / ns
		s.TokensPerSuccess = float64(a.tokens) / ns
		s.CostPerSuccess = a.cost / ns
	}
	if a.tokens > 0 {
		s.RetryTax = float64(a.tokens-a.keptTok) / float64(a.tokens)
	}
	s.RetryTaxUSD = max(a.cost-a.kept, 0)
	if a.cost > 0 {
		s.RetryTaxUSDShare = s.RetryTaxUSD / a.cost
	}
	return s
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
			s, err := loadScript(c.Script)
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
