package rehearse

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/retrygate/retrygate/rehearse/seat"
)

// VirtualOptions runs jobs on the virtual clock.
type VirtualOptions struct {
	Jobs int
	// Concurrency is how many jobs run at once when Rate is 0 (default 1:
	// one after another). A finished job's slot starts the next at once.
	Concurrency int
	// Rate > 0 makes arrivals a Poisson process of Rate jobs per second
	// from the loop's seeded source, each job starting when it arrives,
	// with no cap on how many run at once: breakers and retry storms show.
	Rate float64
	// Ramp steps through Poisson rates instead of Rate; arrivals end with
	// its last step.
	Ramp []Step
	// Duration > 0 bounds the run by virtual time: no job starts after
	// it, and attempts in flight or sleeps at it are cut as Ctrl-C cuts
	// them. With Duration (or a Ramp) Jobs 0 means no bound by count.
	Duration time.Duration
	Start    time.Time       // virtual time zero: the first row's ts
	Ctx      context.Context // optional; checked every few thousand events
}

// Result is how a run went.
type Result struct {
	Started     int  // jobs started
	Interrupted bool // the context was cancelled before every job finished
	Ends        Ends
	Elapsed     time.Duration // from the first job's start to the last event
	// Arrivals is how an open-loop run (a rate or a ramp) held its rate.
	Arrivals ArrivalStats
}

const (
	evArrive uint8 = iota
	evDone
	evWake
	evStop // Duration has passed
)

// event is one thing that happens at a virtual instant. seq breaks ties
// in scheduling order, so a run is the same every time.
type event struct {
	at   int64 // ns since Start
	seq  uint64
	job  *Job
	kind uint8
}

func (a *event) before(b *event) bool {
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

// A hand-rolled 4-ary heap of values: container/heap would box each
// event in an interface, an allocation per push. Four children a node
// halve the levels a pop walks down, and each level moves one event into
// the hole instead of swapping two. (at, seq) orders events totally, so
// any heap pops them in the same order.
const heapArity = 4

func (l *Loop) push(e event) {
	h := append(l.vheap, e)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / heapArity
		if !e.before(&h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = e
	l.vheap = h
}

func (l *Loop) pop() event {
	h := l.vheap
	top := h[0]
	n := len(h) - 1
	last := h[n]
	h = h[:n]
	l.vheap = h
	if n == 0 {
		return top
	}
	i := 0
	for {
		c := heapArity*i + 1
		if c >= n {
			break
		}
		// the earliest of up to four children
		m := c
		for k := c + 1; k < c+heapArity && k < n; k++ {
			if h[k].before(&h[m]) {
				m = k
			}
		}
		if !h[m].before(&last) {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = last
	return top
}

// RunVirtual runs o.Jobs jobs on the virtual clock: every seat's plan is
// resolved with seat.Resolve under the attempt's hard timeout and wait
// cap, its completion scheduled at submit+elapsed, and sleeps are events.
// It starts no goroutine and allocates nothing per attempt; per job it
// allocates only the job id. Every seat in the chain needs a Planner.
func (l *Loop) RunVirtual(o VirtualOptions) (Result, error) {
	for i := range l.seats {
		if l.seats[i].planner == nil {
			return Result{}, fmt.Errorf("seat %q: only script seats run on the virtual clock", l.seats[i].name)
		}
	}
	if err := checkLoad(o.Jobs, o.Rate, o.Ramp, o.Duration); err != nil {
		return Result{}, err
	}
	arr := newArrivals(o.Rate, o.Ramp, o.Duration)
	o.Jobs = limit(o.Jobs, arr, o.Duration)
	if o.Ctx != nil && o.Ctx.Err() != nil {
		return Result{Interrupted: o.Jobs > 0, Ends: l.ends}, nil // stopped before it began
	}
	conc := max(o.Concurrency, 1)
	v := vrun{l: l, o: o, start: o.Start, arr: arr, end: math.MaxInt64}
	if o.Duration > 0 {
		v.end = int64(o.Duration)
	}
	l.vheap = l.vheap[:0]
	if o.Jobs > 0 {
		if o.Duration > 0 {
			// Last among the events of its instant: an attempt ending
			// exactly at the deadline is written as it ended.
			l.push(event{at: v.end, seq: math.MaxUint64, kind: evStop})
		}
		if arr.open() {
			v.schedule(0, nil, evArrive)
		} else {
			for i := 0; i < conc && v.started < o.Jobs; i++ {
				v.startJob(0)
			}
		}
	}
	var n uint
	ctxCut := false
	for len(l.vheap) > 0 || v.arriving {
		if n++; n&4095 == 0 && o.Ctx != nil && o.Ctx.Err() != nil {
			v.cancelAll()
			ctxCut = true
			break
		}
		var ev event
		if v.arriving && (len(l.vheap) == 0 || v.arrival.before(&l.vheap[0])) {
			ev, v.arriving = v.arrival, false
		} else {
			ev = l.pop()
		}
		v.now = ev.at
		switch ev.kind {
		case evArrive:
			if v.started+1 < v.o.Jobs {
				if at, ok := v.arr.next(l.rng, ev.at); ok {
					v.last = at
					v.schedule(at, nil, evArrive)
				}
			}
			v.startJob(ev.at)
			continue
		case evStop:
			v.stopped = true
			v.cancelAll()
			continue
		case evDone:
			j := ev.job
			l.seats[j.plan.Seat].busy--
			v.apply(j, l.Done(j, &j.obs, v.start.Add(time.Duration(ev.at))))
		case evWake:
			v.apply(ev.job, l.Woke(ev.job, v.start.Add(time.Duration(ev.at))))
		}
	}
	if o.Ctx != nil && o.Ctx.Err() != nil && (len(l.vheap) > 0 || v.arriving) {
		v.cancelAll()
		ctxCut = true
	}
	res := Result{Started: v.started, Ends: l.ends, Elapsed: time.Duration(v.now)}
	if o.Duration > 0 || arr.end > 0 {
		res.Interrupted = ctxCut
	} else {
		res.Interrupted = res.Ends.Total() < o.Jobs
	}
	if arr.open() {
		// On the virtual clock every job starts on its instant: the
		// achieved rate is the scheduled one.
		w, span := time.Duration(v.last), true
		if o.Duration > 0 && v.stopped {
			w, span = time.Duration(v.end), false
		} else if arr.end > 0 && v.started < o.Jobs {
			w, span = time.Duration(arr.end), false
		}
		r := perSecond(v.started, w, span)
		res.Arrivals = ArrivalStats{Target: targetRate(o.Rate, o.Ramp), Scheduled: r, Achieved: r, Started: v.started, Window: w}
	}
	return res, nil
}

type vrun struct {
	l       *Loop
	o       VirtualOptions
	start   time.Time
	now     int64
	started int
	seq     uint64
	free    *Job

	arr arrivals
	// arrival is the next arrival, when arriving: one is pending at a
	// time, so it waits beside the heap rather than in it, and the heap
	// holds only the jobs' own events.
	arrival  event
	arriving bool
	last     int64 // the last arrival's instant
	end      int64 // Duration's instant (MaxInt64: none)
	stopped  bool  // Duration passed
}

func (v *vrun) schedule(at int64, j *Job, kind uint8) {
	v.seq++
	if kind == evArrive {
		v.arrival, v.arriving = event{at: at, seq: v.seq, kind: kind}, true
		return
	}
	v.l.push(event{at: at, seq: v.seq, job: j, kind: kind})
}

func (v *vrun) startJob(at int64) { v.apply(v.begin(at)) }

// begin starts the next job at at, on a Job from the free list.
func (v *vrun) begin(at int64) (*Job, Action) {
	j := v.free
	if j != nil {
		v.free = j.free
	} else {
		j = new(Job)
	}
	v.started++
	return j, v.l.Start(j, v.started, v.start.Add(time.Duration(at)))
}

// apply carries out a job's next action at the current virtual instant.
// With jobs one after another, a job that ends at once (refused before
// it sent anything: an open breaker takes no virtual time) starts the
// next here, in a loop: a run of such jobs must not grow the stack.
func (v *vrun) apply(j *Job, a Action) {
	for {
		switch a.Kind {
		case Send:
			st := &v.l.seats[a.Seat]
			plan := &st.plan
			if lp, ok := st.planner.(seat.LoadPlanner); ok {
				lp.PlanLoadedTo(plan, st.calls, st.busy+1)
			} else {
				*plan = st.planner.PlanFor(st.calls)
			}
			st.calls++
			st.busy++
			seat.ResolveTo(&j.obs, plan, a.Hard, a.WaitCap, v.l.pol.Retry.SlowServerAfter)
			j.obs.Seat = st.name
			v.schedule(addNS(v.now, j.obs.Elapsed), j, evDone)
			return
		case Sleep:
			v.schedule(addNS(v.now, a.Sleep), j, evWake)
			return
		case Finished:
			j.free, v.free = v.free, j
			if v.arr.open() || v.started >= v.o.Jobs || v.now >= v.end {
				return
			}
			j, a = v.begin(v.now)
		default:
			return
		}
	}
}

func addNS(at int64, d time.Duration) int64 {
	if d > 0 && at > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return at + int64(max(d, 0))
}

// cancelAll ends every job still running at the current instant, as
// Ctrl-C does in real time: attempts in flight are cancelled, sleepers
// stopped, jobs not yet arrived never start.
func (v *vrun) cancelAll() {
	now := v.start.Add(time.Duration(v.now))
	v.arriving = false // jobs not yet arrived never start
	for len(v.l.vheap) > 0 {
		ev := v.l.pop()
		j := ev.job
		switch ev.kind {
		case evDone:
			v.l.seats[j.plan.Seat].busy--
			j.obs = cutShort(j.obs, now.Sub(j.submit))
			v.l.Done(j, &j.obs, now)
		case evWake:
			v.l.Cancel(j, now)
		}
	}
	v.o.Jobs = 0 // start nothing more
}
