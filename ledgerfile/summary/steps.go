package summary

import (
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// Step is one stretch of a run's time (Options.Steps): the load the
// seats saw in it and what came of it. A retry storm shows here as the
// retry share climbing while goodput falls.
type Step struct {
	FromS    float64 `json:"from_s"` // seconds after Options.StepsFrom
	Attempts int64   `json:"attempts"`
	Retries  int64   `json:"retries"` // sent attempts that were a job's attempt 2 or later
	// RetryShare is Retries ÷ Attempts: the share of the seats' load that
	// was retries.
	RetryShare Figure `json:"retry_share"`
	// Answers are the ok attempts that ended in the step; Goodput is
	// them per second of the step.
	Answers int64   `json:"answers"`
	Goodput Figure  `json:"goodput_per_s"`
	USD     float64 `json:"usd"` // cost of the attempts sent in the step
}

// steps counts rows into Steps by their ts (an answer by its end).
type steps struct {
	from  time.Time
	every time.Duration
	s     []Step
}

func (st *steps) at(t time.Time) *Step {
	if t.Before(st.from) {
		return nil
	}
	i := int(t.Sub(st.from) / st.every)
	for len(st.s) <= i {
		st.s = append(st.s, Step{FromS: (time.Duration(len(st.s)) * st.every).Seconds()})
	}
	return &st.s[i]
}

func (st *steps) add(r *ledgerfile.Row) {
	if r.TS.IsZero() || !r.WasSent() {
		return
	}
	if s := st.at(r.TS); s != nil {
		s.Attempts++
		if r.Attempt >= 2 {
			s.Retries++
		}
		s.USD = admit.AddUSD(s.USD, r.CostUSD)
	}
	if r.Outcome == admit.OK {
		if s := st.at(r.TS.Add(r.Elapsed)); s != nil {
			s.Answers++
		}
	}
}

func (st *steps) close() []Step {
	for i := range st.s {
		s := &st.s[i]
		s.RetryShare = ratio(float64(s.Retries), float64(s.Attempts))
		s.Goodput = Figure(float64(s.Answers) / st.every.Seconds())
	}
	return st.s
}
