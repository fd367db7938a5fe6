package cmd

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/ledgerfile/summary/chart"
)

// drawData is what report --html and --svg draw beside the summary's
// figures, gathered in the same pass: the raw attempts of the jobs the
// timeline shows, decisions per time bucket, and gen per group. It holds
// no figure of its own: every number the page prints comes from a
// summary.Summary.
type drawData struct {
	sum  *summary.Summarizer
	held *summary.Summarizer // the held-out rows alone

	gen      map[string]*summary.DistAcc
	genOrder []string
	genAll   summary.DistAcc

	open map[string]*jobTrace
	cur  *jobTrace // the job of the last row, while it is open
	free []*jobTrace
	top  []*jobTrace

	unit    int64 // seconds per bucket, doubled as the log's span grows
	buckets map[int64]*bucket
	seats   []string
	seatIx  map[string]int

	policy policyWatch
	since  time.Time // rows before it are left out, as the summary leaves them
}

const timelineJobs = 20

// maxGenGroups bounds the groups gen is counted for.
const maxGenGroups = 64
const maxTraceRows = 32

type bucket struct {
	admit    int64
	refusals []int64 // by admit.Reasons, then "other"
	sent     []int64 // by seat index
}

type jobTrace struct {
	id      string
	rows    []chart.TimelineAttempt
	end     string
	cursor  float64 // where the next attempt starts when rows have no ts
	firstTS time.Time
	hasTS   bool
	span    float64
}

func newDrawData(sum *summary.Summarizer, heldOpts summary.Options) *drawData {
	return &drawData{
		sum: sum, held: summary.New(heldOpts),
		gen: map[string]*summary.DistAcc{}, open: map[string]*jobTrace{},
		unit: 1, buckets: map[int64]*bucket{}, seatIx: map[string]int{}, since: heldOpts.Since,
	}
}

// add takes one row, after the summary has.
func (d *drawData) add(r *ledgerfile.Row, file string) {
	if !d.since.IsZero() && !r.TS.IsZero() && r.TS.Before(d.since) {
		return
	}
	if r.Holdout {
		d.held.Add(r, file)
	}
	if g, ok := summary.Gen(r); ok {
		d.genAll.AddDur(g)
		// Gen per group only while the groups are few: a count per
		// distinct value per group is cheap for seats, not for jobs.
		if key := d.sum.GroupKey(r, file); d.gen != nil {
			acc := d.gen[key]
			if acc == nil && len(d.gen) < maxGenGroups {
				acc = &summary.DistAcc{}
				d.gen[key] = acc
				d.genOrder = append(d.genOrder, key)
			}
			if acc != nil {
				acc.AddDur(g)
			} else {
				d.gen, d.genOrder = nil, nil // too many groups: gen is drawn for (all) alone
			}
		}
	}
	d.addBucket(r)
	d.addTrace(r, file)
}

func (d *drawData) seat(name string) int {
	if name == "" {
		name = summary.NoValue
	}
	i, ok := d.seatIx[name]
	if !ok {
		i = len(d.seats)
		d.seats = append(d.seats, name)
		d.seatIx[name] = i
	}
	return i
}

func (d *drawData) addBucket(r *ledgerfile.Row) {
	if r.TS.IsZero() {
		return
	}
	k := r.TS.Unix() / d.unit
	b := d.buckets[k]
	if b == nil {
		if len(d.buckets) >= 4096 {
			d.coarsen()
			k = r.TS.Unix() / d.unit
			b = d.buckets[k]
		}
		if b == nil {
			b = &bucket{refusals: make([]int64, len(admit.Reasons)+1)}
			d.buckets[k] = b
		}
	}
	if reason := r.Reason(); reason != "" {
		i := slices.Index(admit.Reasons, admit.Reason(reason))
		if i < 0 {
			i = len(admit.Reasons)
		}
		b.refusals[i]++
	} else if r.WasSent() {
		b.admit++
	}
	if r.WasSent() {
		s := d.seat(r.Seat)
		for len(b.sent) <= s {
			b.sent = append(b.sent, 0)
		}
		b.sent[s]++
	}
}

// coarsen doubles the bucket width so the buckets stay few however long
// the log's span.
func (d *drawData) coarsen() {
	for len(d.buckets) >= 2048 {
		d.unit *= 2
		out := map[int64]*bucket{}
		for k, b := range d.buckets {
			nk := floorDiv(k, 2)
			if o := out[nk]; o != nil {
				o.admit += b.admit
				for i, v := range b.refusals {
					o.refusals[i] += v
				}
				for len(o.sent) < len(b.sent) {
					o.sent = append(o.sent, 0)
				}
				for i, v := range b.sent {
					o.sent[i] += v
				}
			} else {
				out[nk] = b
			}
		}
		d.buckets = out
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func (d *drawData) addTrace(r *ledgerfile.Row, file string) {
	id := r.Job
	if id == "" {
		id = file + ":" + strconv.Itoa(r.Line) // a row without a job id is a job of its own
	}
	t := d.cur
	if t == nil || t.id != id {
		// Rows of one job are adjacent unless jobs interleave: most rows
		// skip the map.
		t = d.open[id]
		if t == nil {
			if n := len(d.free); n > 0 {
				t, d.free = d.free[n-1], d.free[:n-1]
				*t = jobTrace{id: id, rows: t.rows[:0]}
			} else {
				t = &jobTrace{id: id}
			}
			d.open[id] = t
		}
		d.cur = t
	}
	start := t.cursor + r.Delay.Seconds()
	if !r.TS.IsZero() {
		if !t.hasTS {
			t.firstTS, t.hasTS = r.TS, true
		}
		start = r.TS.Sub(t.firstTS).Seconds()
	}
	a := chart.TimelineAttempt{Start: start, Seat: r.Seat, Outcome: string(r.Outcome), Fallback: r.Fallback}
	end := start
	if r.WasSent() {
		a.Wait = r.Wait.Seconds()
		if g, ok := summary.Gen(r); ok {
			a.Gen = g.Seconds()
		}
		end = start + r.Elapsed.Seconds()
	} else {
		a.Refused = r.Reason()
		if a.Refused == "" {
			a.Refused = "unsent"
		}
	}
	if len(t.rows) < maxTraceRows {
		t.rows = append(t.rows, a)
	}
	t.cursor = end
	t.span = math.Max(t.span, end)
	if r.JobEnd != "" || r.Job == "" {
		t.end = r.JobEnd
		d.finish(t)
	}
}

// worse orders jobs for the timeline: jobs that did not succeed first,
// then the slowest.
func worse(a, b *jobTrace) bool {
	fa, fb := a.end != ledgerfile.JobSucceeded, b.end != ledgerfile.JobSucceeded
	if fa != fb {
		return fa
	}
	if a.span != b.span {
		return a.span > b.span
	}
	return a.id < b.id
}

func (d *drawData) finish(t *jobTrace) {
	delete(d.open, t.id)
	if d.cur == t {
		d.cur = nil
	}
	if len(d.top) == timelineJobs && !worse(t, d.top[len(d.top)-1]) {
		d.free = append(d.free, t) // not drawn: its slot serves the next job
		return
	}
	i, _ := slices.BinarySearchFunc(d.top, t, func(x, y *jobTrace) int {
		if worse(x, y) {
			return -1
		}
		return 1
	})
	d.top = slices.Insert(d.top, i, t)
	if len(d.top) > timelineJobs {
		d.free = append(d.free, d.top[timelineJobs])
		d.top = d.top[:timelineJobs]
	}
}

// close ends the jobs the log never ended.
func (d *drawData) close() {
	ids := make([]string, 0, len(d.open))
	for id := range d.open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		d.finish(d.open[id])
	}
}

func (d *drawData) timeline() []chart.TimelineJob {
	out := []chart.TimelineJob{}
	for _, t := range d.top {
		out = append(out, chart.TimelineJob{ID: t.id, End: t.end, Attempts: t.rows})
	}
	return out
}

// decisionBars is the decisions chart's bars: at most 60, each a run of
// buckets, labelled by the time it starts, and the summary's breaker
// spans shaded over them.
func (d *drawData) decisionBars(breaker []summary.BreakerSpan) (bars []chart.Stack, rates []chart.Line, spans []chart.Span, secondsPer float64) {
	if len(d.buckets) == 0 {
		return nil, nil, nil, 0
	}
	keys := make([]int64, 0, len(d.buckets))
	for k := range d.buckets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	lo, hi := keys[0], keys[len(keys)-1]
	per := max(1, (hi-lo+1+59)/60)
	n := int((hi-lo)/per) + 1
	secondsPer = float64(per * d.unit)
	bars = make([]chart.Stack, n)
	rates = make([]chart.Line, len(d.seats))
	for i, s := range d.seats {
		rates[i] = chart.Line{Name: "attempts/min on " + s, Values: make([]float64, n)}
	}
	layout := "15:04:05"
	if secondsPer >= 60 {
		layout = "01-02 15:04"
	}
	for i := range bars {
		bars[i] = chart.Stack{Label: time.Unix((lo+int64(i)*per)*d.unit, 0).UTC().Format(layout), Values: make([]float64, len(admit.Reasons)+2)}
	}
	for _, k := range keys {
		b := d.buckets[k]
		i := int((k - lo) / per)
		bars[i].Values[0] += float64(b.admit)
		for j, v := range b.refusals {
			bars[i].Values[1+j] += float64(v)
		}
		for s, v := range b.sent {
			rates[s].Values[i] += float64(v) * 60 / secondsPer
		}
	}
	index := func(t time.Time) int {
		k := floorDiv(t.Unix(), d.unit)
		return max(0, min(n-1, int((k-lo)/per)))
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
