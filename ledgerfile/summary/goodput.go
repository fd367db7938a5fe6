package summary

import (
	"math/big"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// Goodput is docs/load.md's goodput: the jobs that meet every per-job
// threshold of the policy, per second of the run.
//
// A job is good when it succeeded and its ok attempt's own value meets
// each threshold on a per-attempt metric (wait_s, ttfb_s, elapsed_s,
// tokens, tpot_s, output_tps), the threshold's operator and limit applied
// to that one value (its aggregation, p(95) or avg, is a statement about
// the run; for one job it is the value). A value the attempt does not
// have (no ttfb, one completion token for tpot_s) cannot show the job met
// it: the job is not good. Thresholds on run-level figures (rates, ratios,
// goodput itself) do not judge single jobs and are left out.
type Goodput struct {
	Good      int64         `json:"good_jobs"`
	Jobs      int64         `json:"jobs"`
	Share     Figure        `json:"share"`      // good ÷ jobs
	Window    time.Duration `json:"-"`          // first row's ts → last attempt's end
	WindowS   float64       `json:"window_s"`   // Window in seconds
	PerSecond Figure        `json:"per_second"` // good ÷ window
}

// goodput judges answers against the per-job thresholds as rows stream
// past; the summary keeps each job's verdict on its kept answer and
// counts the job once, when it counts the job's end state (jobEnd), so
// goodput's jobs are the summary's jobs.
type goodput struct {
	ts       []Threshold    // the per-job ones
	vs       []attemptValue // each one's metric, found once rather than by its name on every row
	one      oneValue       // the one value to judge, reused
	oneTrend admit.Trend    // &one, boxed once
	first    time.Time
	last     time.Time
	has      bool
	good, of int64
}

func newGoodput(ts []Threshold) *goodput {
	g := &goodput{}
	g.oneTrend = &g.one
	for _, t := range ts {
		if v := attemptValues[t.Metric]; v != nil && t.Agg != admit.AggCount {
			g.ts = append(g.ts, t)
			g.vs = append(g.vs, v)
		}
	}
	return g
}

// attemptValue is one sent attempt's value of a per-attempt metric,
// exactly as the summary counts it.
type attemptValue func(r *ledgerfile.Row) (Dec, bool)

// attemptValues are the per-attempt metrics, by name.
var attemptValues = map[string]attemptValue{
	"wait_s":     func(r *ledgerfile.Row) (Dec, bool) { return secondsDec(r.Wait), true },
	"ttfb_s":     func(r *ledgerfile.Row) (Dec, bool) { return secondsDec(r.TTFB), r.HasTTFB },
	"elapsed_s":  func(r *ledgerfile.Row) (Dec, bool) { return secondsDec(r.Elapsed), true },
	"tokens":     func(r *ledgerfile.Row) (Dec, bool) { return DecOf(uint64(admit.ClampTokens(r.Tokens)), 0), true },
	"tpot_s":     units(tpotUnits, tpotExp),
	"output_tps": units(tpsUnits, tpsExp),
	"itl_s": func(r *ledgerfile.Row) (Dec, bool) {
		d, ok := itlDur(r)
		return secondsDec(d), ok
	},
}

// units is a per-attempt metric counted in units of 10^-exp.
func units(fn func(*ledgerfile.Row) (int64, bool), exp int32) attemptValue {
	return func(r *ledgerfile.Row) (Dec, bool) {
		u, ok := fn(r)
		return DecOf(uint64(max(u, 0)), -exp), ok
	}
}

// window takes a row's time into the run's window: first row's ts to the
// last attempt's end. A row without a ts has no time to take.
func (g *goodput) window(r *ledgerfile.Row) {
	if r.TS.IsZero() {
		return
	}
	end := r.TS
	if r.WasSent() {
		end = r.TS.Add(ledgerfile.Kept(r.Elapsed))
	}
	if !g.has || r.TS.Before(g.first) {
		g.first = r.TS
	}
	if !g.has || end.After(g.last) {
		g.last = end
	}
	g.has = true
}

// meets reports whether an ok attempt's own values meet every per-job
// threshold.
func (g *goodput) meets(r *ledgerfile.Row) bool {
	for i := range g.ts {
		x, ok := g.vs[i](r)
		if !ok {
			return false
		}
		g.one = oneValue{x, x.Float64()}
		if _, pass := g.ts[i].Eval(admit.Observed{Values: g.oneTrend}); !pass {
			return false
		}
	}
	return true
}

// job counts one job at its end: good when it succeeded with its kept
// answer meeting every threshold.
func (g *goodput) job(succeeded, keptMet bool) {
	g.of++
	if succeeded && keptMet {
		g.good++
	}
}

// oneValue is a one-value distribution without the arithmetic: the
// mean of one value and each of its nearest-rank percentiles are that
// value, so a threshold judges one attempt's value as it would judge a
// one-value distribution, exactly.
type oneValue struct {
	d Dec
	f float64 // d's double
}

func (*oneValue) Len() int64                       { return 1 }
func (v *oneValue) Mean() float64                  { return v.f }
func (v *oneValue) Percentile(float64) float64     { return v.f }
func (v *oneValue) MeanRat() *big.Rat              { return v.d.Rat() }
func (v *oneValue) PercentileRat(float64) *big.Rat { return v.d.Rat() }

func (g *goodput) close() Goodput {
	out := Goodput{Good: g.good, Jobs: g.of, Share: ratio(float64(g.good), float64(g.of))}
	if g.has {
		out.Window = g.last.Sub(g.first)
	}
	out.WindowS = out.Window.Seconds()
	out.PerSecond = ratio(float64(g.good), out.WindowS)
	return out
}
