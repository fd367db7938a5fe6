package summary

import (
	"time"

	"retrygate/admit"
	"retrygate/ledgerfile"
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
	ts       []Threshold     // the per-job ones
	ms       []attemptMetric // each one's metric
	one      oneValue        // the one value to judge, reused
	oneTrend admit.Trend     // &one, boxed once
	first    time.Time
	last     time.Time
	has      bool
	good, of int64
}

func newGoodput(ts []Threshold) *goodput {
	g := &goodput{}
	g.oneTrend = &g.one
	for _, t := range ts {
		if perAttempt(t.Metric) && t.Agg != admit.AggCount {
			g.ts = append(g.ts, t)
			g.ms = append(g.ms, attemptMetricOf(t.Metric))
		}
	}
	return g
}

func perAttempt(metric string) bool { return attemptMetricOf(metric) != notPerAttempt }

// attemptMetric is a per-attempt metric, found once per threshold rather
// than by its name on every row.
type attemptMetric uint8

const (
	notPerAttempt attemptMetric = iota
	metricWait
	metricTTFB
	metricElapsed
	metricTokens
	metricTPOT
	metricOutputTPS
	metricITL
)

func attemptMetricOf(metric string) attemptMetric {
	switch metric {
	case "wait_s":
		return metricWait
	case "ttfb_s":
		return metricTTFB
	case "elapsed_s":
		return metricElapsed
	case "tokens":
		return metricTokens
	case "tpot_s":
		return metricTPOT
	case "output_tps":
		return metricOutputTPS
	case "itl_s":
		return metricITL
	}
	return notPerAttempt
}

// value is one sent attempt's value of the metric.
func (m attemptMetric) value(r *ledgerfile.Row) (float64, bool) {
	switch m {
	case metricWait:
		return Seconds(r.Wait), true
	case metricTTFB:
		return Seconds(r.TTFB), r.HasTTFB
	case metricElapsed:
		return Seconds(r.Elapsed), true
	case metricTokens:
		return float64(r.Tokens), true
	case metricTPOT:
		return TPOT(r)
	case metricOutputTPS:
		return OutputTPS(r)
	case metricITL:
		return ITL(r)
	}
	return 0, false
}

// window takes a row's time into the run's window: first row's ts to the
// last attempt's end. A row without a ts has no time to take.
func (g *goodput) window(r *ledgerfile.Row) {
	if r.TS.IsZero() {
		return
	}
	end := r.TS
	if r.WasSent() {
		end = r.TS.Add(logged(r.Elapsed))
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
		x, ok := g.ms[i].value(r)
		if !ok {
			return false
		}
		g.one = oneValue(x)
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

// oneValue is admit.SortedValues{x} without the arithmetic: the mean of
// one value and each of its nearest-rank percentiles are that value (x/1
// and sorted[0]), so a threshold judges one attempt's value as it would
// judge a one-value distribution.
type oneValue float64

func (*oneValue) Len() int64                   { return 1 }
func (v *oneValue) Mean() float64              { return float64(*v) }
func (v *oneValue) Percentile(float64) float64 { return float64(*v) }

func (g *goodput) close() Goodput {
	out := Goodput{Good: g.good, Jobs: g.of, Share: ratio(float64(g.good), float64(g.of))}
	if g.has {
		out.Window = g.last.Sub(g.first)
	}
	out.WindowS = out.Window.Seconds()
	out.PerSecond = ratio(float64(g.good), out.WindowS)
	return out
}
