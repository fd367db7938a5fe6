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

// goodput counts good jobs as rows stream past; memory is per open job
// whose answer came before its last row (an answer on the last row, the
// usual case, is judged there and kept nowhere).
type goodput struct {
	ts       []Threshold     // the per-job ones
	ms       []attemptMetric // each one's metric
	okMet    map[string]bool
	one      oneValue    // the one value to judge, reused
	oneTrend admit.Trend // &one, boxed once
	first    time.Time
	last     time.Time
	has      bool
	good, of int64
}

func newGoodput(ts []Threshold) *goodput {
	g := &goodput{okMet: map[string]bool{}}
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
		return logged(r.Wait).Seconds(), true
	case metricTTFB:
		return logged(r.TTFB).Seconds(), r.HasTTFB
	case metricElapsed:
		return logged(r.Elapsed).Seconds(), true
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

func (g *goodput) add(r *ledgerfile.Row) {
	end := r.TS
	if !r.Unsent {
		end = r.TS.Add(logged(r.Elapsed))
	}
	if !g.has || r.TS.Before(g.first) {
		g.first = r.TS
	}
	if !g.has || end.After(g.last) {
		g.last = end
	}
	g.has = true
	judged, met := false, false
	if !r.Unsent && r.Outcome == admit.OK {
		judged, met = true, true
		for i := range g.ts {
			t := &g.ts[i]
			x, ok := g.ms[i].value(r)
			if !ok {
				met = false
				break
			}
			g.one = oneValue(x)
			if _, pass := t.Eval(admit.Observed{Values: g.oneTrend}); !pass {
				met = false
				break
			}
		}
	}
	if r.JobEnd == "" {
		if judged {
			g.okMet[r.Job] = met
		}
		return
	}
	g.of++
	if len(g.okMet) > 0 {
		if !judged {
			met = g.okMet[r.Job]
		}
		delete(g.okMet, r.Job)
	}
	if r.JobEnd == ledgerfile.JobSucceeded && met {
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
