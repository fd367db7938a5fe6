// What report --html draws beside the figures, counted by the one
// aggregator as it counts them (Options.Draw): decisions over time, the
// slowest or failed jobs' attempts, gen per group. Views only draw it.

package summary

import (
	"slices"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// Drawing is what the pictures draw beside the figures.
type Drawing struct {
	// Buckets are the rows by time of submit, each BucketSeconds long,
	// ascending (only those that hold a row); rows without a ts are in
	// none.
	BucketSeconds int64
	Buckets       []Bucket
	// Seats names Bucket.BySeat's columns, in the order seats first came.
	Seats []string
	// Timeline is the TimelineJobs slowest or failed jobs: those that did
	// not succeed first, then the longest, then by id.
	Timeline []Trace
}

// Bucket is one stretch of time's rows, counted as the tables count them:
// Sent are attempts sent (a live wait-cap cut is one: it counts under
// its outcome), Refused the rows not sent, by reason (admit.Reasons,
// then every other reason), BySeat the attempts sent per seat.
type Bucket struct {
	Start   time.Time
	Sent    int64
	Refused []int64
	BySeat  []int64
}

// Trace is one job's attempts, in seconds from its first submit, and how
// it ended (the summary's end state).
type Trace struct {
	ID       string
	End      string
	Attempts []TraceAttempt
	Span     float64 // seconds from the first submit to the last attempt's end
}

// TraceAttempt is one row of a traced job: a sent attempt (wait then
// gen) or a refusal (its reason).
type TraceAttempt struct {
	Start    float64
	Wait     float64
	Gen      float64
	Seat     string
	Outcome  string
	Fallback bool
	Refused  string // the refusal's reason; the attempt was not sent
}

// TimelineJobs is how many jobs Drawing.Timeline keeps.
const TimelineJobs = 20

// maxTraceRows bounds the attempts drawn of one job.
const maxTraceRows = 32

// maxBuckets bounds the buckets kept: past it their width doubles.
const maxBuckets = 4096

// drawAcc gathers a Drawing as rows stream past.
type drawAcc struct {
	unit    int64 // seconds per bucket, doubled as the log's span grows
	buckets map[int64]*Bucket
	seats   keyIndex
	traces  map[int32]*trace // the log's open jobs, by slot
	top     []*Trace
}

type trace struct {
	Trace
	cursor  float64 // where the next attempt starts when rows have no ts
	firstTS time.Time
	hasTS   bool
}

func newDrawAcc() *drawAcc {
	return &drawAcc{unit: 1, buckets: map[int64]*Bucket{}, traces: map[int32]*trace{}}
}

func (d *drawAcc) bucket(r *ledgerfile.Row, sent bool) {
	if r.TS.IsZero() {
		return
	}
	k := floorDiv(r.TS.Unix(), d.unit)
	b := d.buckets[k]
	if b == nil {
		if len(d.buckets) >= maxBuckets {
			d.coarsen()
			k = floorDiv(r.TS.Unix(), d.unit)
			b = d.buckets[k]
		}
		if b == nil {
			b = &Bucket{Refused: make([]int64, len(admit.Reasons)+1)}
			d.buckets[k] = b
		}
	}
	if !sent {
		i := slices.Index(admit.Reasons, admit.Reason(RefusalReason(r)))
		if i < 0 {
			i = len(admit.Reasons)
		}
		b.Refused[i]++
		return
	}
	b.Sent++
	seat := r.Seat
	if seat == "" {
		seat = NoValue
	}
	s, _ := d.seats.of(seat)
	for int(s) >= len(b.BySeat) {
		b.BySeat = append(b.BySeat, 0)
	}
	b.BySeat[s]++
}

// coarsen doubles the bucket width so the buckets stay few however long
// the log's span.
func (d *drawAcc) coarsen() {
	for len(d.buckets) >= maxBuckets/2 {
		d.unit *= 2
		out := map[int64]*Bucket{}
		for k, b := range d.buckets {
			nk := floorDiv(k, 2)
			o := out[nk]
			if o == nil {
				out[nk] = b
				continue
			}
			o.Sent += b.Sent
			for i, v := range b.Refused {
				o.Refused[i] += v
			}
			for len(o.BySeat) < len(b.BySeat) {
				o.BySeat = append(o.BySeat, 0)
			}
			for i, v := range b.BySeat {
				o.BySeat[i] += v
			}
		}
		d.buckets = out
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// traceOf is the trace of the job in slot ix, opened on its first row.
func (d *drawAcc) traceOf(ix int32, id string) *trace {
	t := d.traces[ix]
	if t == nil {
		t = &trace{Trace: Trace{ID: id}}
		d.traces[ix] = t
	}
	return t
}

// add takes a row into its job's trace.
func (t *trace) add(r *ledgerfile.Row, sent bool) {
	start := t.cursor + ledgerfile.Kept(r.Delay).Seconds()
	if !r.TS.IsZero() {
		if !t.hasTS {
			t.firstTS, t.hasTS = r.TS, true
		}
		start = r.TS.Sub(t.firstTS).Seconds()
	}
	a := TraceAttempt{Start: start, Seat: r.Seat, Outcome: string(r.Outcome), Fallback: r.Fallback}
	end := start
	if sent {
		a.Wait = Seconds(r.Wait)
		if g, ok := Gen(r); ok {
			a.Gen = Seconds(g)
		}
		end = start + Seconds(r.Elapsed)
	} else {
		a.Refused = RefusalReason(r)
	}
	if len(t.Attempts) < maxTraceRows {
		t.Attempts = append(t.Attempts, a)
	}
	t.cursor = end
	t.Span = max(t.Span, end)
}

// finish ends a job's trace with the job's end state, keeping it if it
// is among the worst.
func (d *drawAcc) finish(t *trace, end string) {
	t.End = end
	tr := t.Trace
	if len(d.top) == TimelineJobs && !worse(&tr, d.top[len(d.top)-1]) {
		return
	}
	i, _ := slices.BinarySearchFunc(d.top, &tr, func(x, y *Trace) int {
		if worse(x, y) {
			return -1
		}
		return 1
	})
	d.top = slices.Insert(d.top, i, &tr)
	if len(d.top) > TimelineJobs {
		d.top = d.top[:TimelineJobs]
	}
}

// worse orders jobs for the timeline: jobs that did not succeed first,
// then the slowest, then by id.
func worse(a, b *Trace) bool {
	fa, fb := a.End != ledgerfile.JobSucceeded, b.End != ledgerfile.JobSucceeded
	if fa != fb {
		return fa
	}
	if a.Span != b.Span {
		return a.Span > b.Span
	}
	return a.ID < b.ID
}

func (d *drawAcc) close() *Drawing {
	out := &Drawing{BucketSeconds: d.unit, Seats: d.seats.keys}
	keys := make([]int64, 0, len(d.buckets))
	for k := range d.buckets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b := d.buckets[k]
		b.Start = time.Unix(k*d.unit, 0).UTC()
		for len(b.BySeat) < len(out.Seats) {
			b.BySeat = append(b.BySeat, 0)
		}
		out.Buckets = append(out.Buckets, *b)
	}
	for _, t := range d.top {
		out.Timeline = append(out.Timeline, *t)
	}
	return out
}
