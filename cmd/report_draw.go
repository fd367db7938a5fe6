package cmd

import (
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/cmd/internal/chart"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// drawData is what report --html and --svg read beside the one summary
// (which counts what they draw: summary.Options.Draw): the held-out
// rows' own summary, and the log's # policy lines. It holds no figure of
// its own: every number the pictures draw comes from a summary.Summary.
type drawData struct {
	held   *summary.Summarizer // the held-out rows alone
	policy policyWatch
}

func newDrawData(heldOpts summary.Options) *drawData {
	return &drawData{held: summary.New(heldOpts)}
}

// add takes one row, after the summary has.
func (d *drawData) add(r *ledgerfile.Row, file string) {
	if r.Holdout {
		d.held.Add(r, file)
	}
}

// endLog ends a log for the held-out rows' summary, as for the summary.
func (d *drawData) endLog() { d.held.EndLog() }

// decisionBars lays the summary's buckets out as the decisions chart's
// bars: at most 60, each a run of buckets, labelled by the time it
// starts, with the attempts sent and the refusals by reason (as the
// tables count them: a live wait-cap cut was sent), the attempts per
// minute on each seat, and the summary's breaker spans shaded over them.
func decisionBars(dr *summary.Drawing, breaker []summary.BreakerSpan) (bars []chart.Stack, rates []chart.Line, spans []chart.Span, secondsPer float64) {
	if dr == nil || len(dr.Buckets) == 0 {
		return nil, nil, nil, 0
	}
	unit := dr.BucketSeconds
	key := func(t time.Time) int64 { return floorDiv(t.Unix(), unit) }
	lo, hi := key(dr.Buckets[0].Start), key(dr.Buckets[len(dr.Buckets)-1].Start)
	per := max(1, (hi-lo+1+59)/60)
	n := int((hi-lo)/per) + 1
	secondsPer = float64(per * unit)
	bars = make([]chart.Stack, n)
	rates = make([]chart.Line, len(dr.Seats))
	for i, s := range dr.Seats {
		rates[i] = chart.Line{Name: "attempts/min on " + s, Values: make([]float64, n)}
	}
	layout := "15:04:05"
	if secondsPer >= 60 {
		layout = "01-02 15:04"
	}
	for i := range bars {
		bars[i] = chart.Stack{Label: time.Unix((lo+int64(i)*per)*unit, 0).UTC().Format(layout), Values: make([]float64, len(admit.Reasons)+2)}
	}
	for _, b := range dr.Buckets {
		i := int((key(b.Start) - lo) / per)
		bars[i].Values[0] += float64(b.Sent)
		for j, v := range b.Refused {
			bars[i].Values[1+j] += float64(v)
		}
		for s, v := range b.BySeat {
			rates[s].Values[i] += float64(v) * 60 / secondsPer
		}
	}
	index := func(t time.Time) int {
		return max(0, min(n-1, int((key(t)-lo)/per)))
	}
	for _, sp := range breaker {
		label := "breaker open: " + sp.Seat
		if sp.Inferred {
			label = "breaker open (refusals): " + sp.Seat
		}
		spans = append(spans, chart.Span{From: index(sp.From), To: index(sp.To), Label: label})
	}
	return bars, rates, spans, secondsPer
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
