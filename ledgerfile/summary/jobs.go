// Jobs and waste: what a job remembers between its rows, its end
// state, its kept answer and the wasted calls before it.

package summary

import (
	"hash/maphash"
	"slices"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

const jobChunk = 4096

// endWindow is how many jobs may end after a job's job_end row while a
// late row of it still rejoins its figures. The job is then counted, once,
// as it stood, and its id forgotten (as the reader forgets it), so memory
// follows the open jobs, never the log's rows: a row that comes later
// than that starts a job of its own.
const endWindow = 1 << 14

// endedJob is a job past its job_end row, in the order jobs ended.
type endedJob struct {
	ix  int32
	seq uint32 // the job's endSeq when it ended; a later row clears it
}

// jobState is the little a job needs remembered between its rows.
type jobState struct {
	groups []int32 // groups touched besides the first

	hash            uint64      // its id's hash (Summarizer.ids)
	endSeq          uint32      // set by its job_end row, cleared by any later row
	spend           admit.Spent // ledgerfile.AddSpent over its sent rows so far
	terms           int         // durations summed into spend.Time
	keptTokens      int64
	keptUSD         float64
	keptUncachedUSD float64
	keptTime        time.Duration // gate time to the kept answer
	candTokens      int64
	candUSD         float64
	start, end      int64 // unix ns of the first row, and of the last row's end; 0 without ts

	firstGroup  int32
	lastGroup   int32
	maxAttempt  int32
	seen        int32 // rows so far, numbering rows without attempt
	billed      int32
	endAttempt  int32
	keptAttempt int32
	keptGroup   int32
	keptSent    int32 // sent attempts up to and including the kept one
	candGroup   int32
	candSeat    int32 // index into Summarizer.seats

	// wasted-call candidate: the current last row, counted once a later attempt appears
	open        bool // the slot holds a job that has not ended
	cand        bool
	candOutcome uint8
	lastOutcome uint8
	lastSent    bool
	lastAmbig   bool
	end8        uint8 // job_end of the latest row carrying one (endCodes)
	fallback    bool
	kept        bool
	keptMet     bool // the kept answer meets every per-attempt threshold (goodput)
	allCost     bool
	missed      bool
}

var endCodes = []string{"", ledgerfile.JobSucceeded, ledgerfile.JobFailed, ledgerfile.JobUnknown, ledgerfile.JobCancelled}

func endCode(s string) uint8 { return uint8(max(slices.Index(endCodes, s), 0)) }

// jobFor finds the open job's slot, or opens one.
func (s *Summarizer) jobFor(id string) int32 {
	if s.hasCur && id == s.curJob {
		return s.curIx
	}
	h := maphash.String(s.seed, id)
	ix, seen := s.ids[h]
	if !seen {
		if n := len(s.free); n > 0 {
			ix, s.free = s.free[n-1], s.free[:n-1]
		} else {
			switch {
			case len(s.jobs) == 0:
				// The first chunk grows as jobs come (a small log, a
				// one-row check, costs little); later ones are whole.
				s.jobs = append(s.jobs, make([]jobState, 0, 16))
			case len(s.jobs[len(s.jobs)-1]) == jobChunk:
				s.jobs = append(s.jobs, make([]jobState, 0, jobChunk))
			}
			c := &s.jobs[len(s.jobs)-1]
			*c = append(*c, jobState{})
			ix = int32((len(s.jobs)-1)*jobChunk + len(*c) - 1)
		}
		s.jobs[ix/jobChunk][ix%jobChunk] = jobState{firstGroup: -1, open: true, hash: h}
		s.ids[h] = ix
	}
	s.curJob, s.curIx, s.hasCur = id, ix, true
	return ix
}

// endJob takes a job past its job_end row into the window of ended jobs;
// the oldest one there, if no row came for it since, is counted and let go.
func (s *Summarizer) endJob(ix int32, js *jobState) {
	s.endSeq++
	if s.endSeq == 0 {
		s.endSeq++ // 0 means "not ended"
	}
	js.endSeq = s.endSeq
	e := endedJob{ix, s.endSeq}
	if len(s.ended) < endWindow {
		s.ended = append(s.ended, e)
		return
	}
	old := s.ended[s.endHead]
	s.ended[s.endHead] = e
	s.endHead = (s.endHead + 1) % endWindow
	o := &s.jobs[old.ix/jobChunk][old.ix%jobChunk]
	if !o.open || o.endSeq != old.seq {
		return // a later row reopened it; a later end queued it again
	}
	s.finishJob(o)
	delete(s.ids, o.hash)
	*o = jobState{}
	s.free = append(s.free, old.ix)
	if s.hasCur && s.curIx == old.ix {
		s.hasCur = false
	}
}

func (s *Summarizer) addJobRow(js *jobState, gi int32, r *ledgerfile.Row, f rowFacts, decision string) {
	js.seen++
	attempt := int32(r.Attempt)
	if attempt == 0 {
		attempt = js.seen
	}
	if js.firstGroup < 0 {
		js.firstGroup = gi
		js.allCost = true
	} else if gi != js.firstGroup && !slices.Contains(js.groups, gi) {
		js.groups = append(js.groups, gi)
	}
	if r.Fallback {
		js.fallback = true
	}
	if r.JobEnd != "" && attempt >= js.endAttempt {
		js.end8, js.endAttempt = endCode(r.JobEnd), attempt
	}
	sent, oi := f.sent, f.oi
	waste := sent && oi != okIndex
	if !r.TS.IsZero() {
		ts := r.TS.UnixNano()
		if js.seen == 1 {
			js.start = ts
		}
		if sent {
			ts += int64(logged(r.Elapsed))
		}
		js.end = ts
	}

	// Seed 000: a non-ok attempt before the job's last attempt is wasted.
	// The last attempt is only known once a later one appears, so the
	// current last row waits as a candidate.
	switch {
	case attempt > js.maxAttempt:
		if js.cand {
			s.countWasted(s.seats.keys[js.candSeat], js.candOutcome, js.candGroup, js.candTokens, js.candUSD)
		}
		js.maxAttempt, js.lastGroup, js.lastOutcome, js.lastSent = attempt, gi, oi, sent
		js.lastAmbig = sent && oi != okIndex && f.billing == admit.Ambiguous
		js.cand = waste
		if waste {
			js.candSeat, _ = s.seats.of(r.Seat)
			js.candOutcome, js.candGroup, js.candTokens = oi, gi, r.Tokens
			js.candUSD = r.CostUSD
		}
	case waste:
		s.countWasted(r.Seat, oi, gi, r.Tokens, r.CostUSD)
	}

	before := js.spend.Time
	if sent {
		ledgerfile.AddSpent(&js.spend, r)
		js.terms += 2
		if f.billing.Billed() {
			js.billed++
		}
		if !r.HasCost {
			js.allCost = false
		}
	}
	if !js.missed && MissesDeadline(decision, r, js.spend.Time, js.terms, s.opts.Deadline) {
		js.missed = true
	}
	if !sent {
		return
	}
	if ProducedContent(r) {
		s.contentWait.addDur(r.Wait)
	} else {
		s.asideWait[oi].addDur(r.Wait)
	}
	if oi == okIndex && (!js.kept || attempt > js.keptAttempt) {
		js.kept, js.keptAttempt, js.keptGroup = true, attempt, gi
		js.keptTokens, js.keptUSD, js.keptUncachedUSD = r.Tokens, r.CostUSD, uncachedUSD(r)
		js.keptSent = int32(js.spend.Attempts)
		if s.good != nil {
			js.keptMet = s.good.meets(r)
		}
		// Elapsed holds the wait: the gate charges wait + gen = elapsed.
		js.keptTime = admit.AddDuration(before, admit.AddDuration(logged(r.Delay), logged(r.Elapsed)))
	}
	if !s.opts.NoStream {
		if x, ok := TPOT(r); ok {
			s.tpot.addScaled(x, tpotUnit)
		}
		if x, ok := OutputTPS(r); ok {
			s.outTPS.addScaled(x, tpsUnit)
		}
		if d, ok := itlDur(r); ok {
			s.itl.addDur(d)
		}
	}
	if oi == okIndex {
		s.okElapsed.addDur(r.Elapsed)
		s.okWait.addDur(r.Wait)
		if r.HasSplit && r.Elapsed > r.Wait {
			s.rateTokens = admit.AddTokens(s.rateTokens, r.CompletionTokens)
			s.rateSeconds += (r.Elapsed - r.Wait).Seconds()
			s.rateRows++
		}
	}
}

func (s *Summarizer) countWasted(seat string, oi uint8, gi int32, tokens int64, usd float64) {
	if seat == "" {
		seat = NoValue
	}
	k := wasteKey{seat, oi}
	w := s.wasted[k]
	if w == nil {
		w = &Wasted{Seat: seat, Outcome: string(admit.Outcomes[oi])}
		s.wasted[k] = w
		s.wasteKeys = append(s.wasteKeys, k)
	}
	w.Calls++
	w.Tokens += tokens
	w.USD += Figure(usd)
	s.groups[gi].g.WastedCalls++
	s.all.g.WastedCalls++
}

// jobEnd is the job's end state: job_end when a row carries it, otherwise
// inferred as the attempt loop would have written it — an ok attempt is
// success; a last attempt that timed out, hit the wait cap or was billed
// ambiguous may have completed server-side, so its fate is unknown (seed
// 004: never collapse unknown into failed); anything else failed.
func (js *jobState) jobEnd() string {
	if js.end8 != 0 {
		return endCodes[js.end8]
	}
	o := admit.Outcomes[js.lastOutcome]
	switch {
	case js.kept:
		return ledgerfile.JobSucceeded
	case js.lastSent && js.lastOutcome == cancelledIndex:
		return ledgerfile.JobCancelled
	case js.lastSent && (o == admit.Timeout || o == admit.WaitCap || js.lastAmbig):
		return ledgerfile.JobUnknown
	}
	return ledgerfile.JobFailed
}

func (s *Summarizer) finishJob(js *jobState) {
	touch := func(g *groupAcc) {
		g.g.Jobs++
		if js.fallback {
			g.g.FallbackJobs++
		}
	}
	touch(s.groups[js.firstGroup])
	for _, gi := range js.groups {
		touch(s.groups[gi])
	}
	touch(s.all)

	end := js.jobEnd()
	if s.good != nil {
		s.good.job(end == ledgerfile.JobSucceeded, js.kept && js.keptMet)
	}
	decider := js.lastGroup
	if end == ledgerfile.JobSucceeded && js.kept {
		decider = js.keptGroup
	}
	for _, g := range []*groupAcc{s.groups[decider], s.all} {
		switch end {
		case ledgerfile.JobSucceeded:
			g.g.Succeeded++
		case ledgerfile.JobUnknown:
			g.g.Unknown++
		case ledgerfile.JobCancelled:
			g.g.Cancelled++
		default:
			g.g.Failed++
		}
	}
	if js.kept {
		for _, g := range []*groupAcc{s.groups[js.keptGroup], s.all} {
			g.keptTokens += js.keptTokens
			g.keptUSD += js.keptUSD
			g.cache.keptUncached += js.keptUncachedUSD
		}
		s.jobTTS.addDur(js.keptTime)
	}
	if end == ledgerfile.JobSucceeded {
		n := int32(js.spend.Attempts)
		if js.kept {
			n = js.keptSent
		}
		s.jobAPS.addUnits(int64(n))
	}
	if js.missed {
		s.misses++
	}
	if js.start != 0 {
		s.jobE2E.addDur(time.Duration(js.end - js.start))
	}
	s.jobs1++
	a, b := float64(js.spend.Attempts), float64(js.billed)
	s.sumAttempts, s.sqAttempts = s.sumAttempts+a, s.sqAttempts+a*a
	s.sumBilled, s.sqBilled = s.sumBilled+b, s.sqBilled+b*b
	s.sumUSD, s.sqUSD = s.sumUSD+js.spend.USD, s.sqUSD+js.spend.USD*js.spend.USD
	if js.spend.Attempts == 0 {
		return // refused before anything went out: no time or tokens to speak of
	}
	s.jobTime.addDur(js.spend.Time)
	s.jobTokens.addUnits(js.spend.Tokens)
	if js.allCost {
		s.jobUSD.addScaled(js.spend.USD, usdUnit)
	}
}
