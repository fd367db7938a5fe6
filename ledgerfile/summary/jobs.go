// Jobs and waste: what a job remembers between its rows, its end
// state, its kept answer and the wasted calls before it.

package summary

import (
	"hash/maphash"
	"math"
	"slices"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

const jobChunk = 4096

// endWindow is how many jobs the replay (replay.go) lets end after a job
// ended before it forgets that job's books. The summary keeps every job
// of a log until the log ends (Summarizer.EndLog).
const endWindow = 1 << 14

// jobState is the little a job needs remembered between its rows.
type jobState struct {
	// second is the second group touched (a fallback seat), -1 before
	// one: most jobs touch one or two, and a job allocates nothing for
	// them; more is the index in Summarizer.more of any after those two
	// (0: none). A jobState holds no pointer, so the garbage collector
	// never scans the jobs a log holds.
	second int32
	more   int32

	spend    admit.Spent   // ledgerfile.AddSpent over its sent rows so far (its USD is usd's)
	usd      Dec           // Σ cost_usd of its sent rows, as they wrote them
	keptTime time.Duration // gate time to the kept answer
	// The kept answer so far (the ok attempt of the highest number): its
	// tokens and cost (cost_usd and uncachedUSD, read as their decimals
	// when taxed) go into the retry tax when a later ok replaces it, or
	// at the end when the job did not succeed.
	keptTokens          int64
	keptUSD, keptUncost float64
	candTokens          int64
	candUSD             float64
	start, end          int64 // unix ns of the earliest row, and of the latest end; 0 without ts
	terms               int32 // durations summed into spend.Time

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
	sentAttempt int32 // the highest attempt number sent

	// wasted-call candidate: the current last row, counted once a later attempt appears
	open        bool // the slot holds a job of the log being read
	ended       bool // its job_end row came (Options.Live): it is counted in turn
	hasTS       bool
	cand        bool
	candOutcome uint8
	// The last sent attempt (the highest number sent), which the writer
	// judges a job without an answer by (admit.EndAfter).
	sentOutcome uint8
	sentAmbig   bool // a slow (ambiguous) 5xx
	anySent     bool
	end8        uint8 // job_end of the latest row carrying one (endCodes)
	fallback    bool
	kept        bool
	keptCost    bool // the kept answer's row carries cost_usd
	keptMet     bool // the kept answer meets every per-attempt threshold (goodput)
	allCost     bool
	missed      bool
}

var endCodes = []string{"", ledgerfile.JobSucceeded, ledgerfile.JobFailed, ledgerfile.JobUnknown, ledgerfile.JobCancelled}

func endCode(s string) uint8 { return uint8(max(slices.Index(endCodes, s), 0)) }

// jobFor finds the slot of the log's job id, or opens one.
func (s *Summarizer) jobFor(id string) int32 {
	if s.hasCur && id == s.curJob {
		return s.curIx
	}
	if s.hasCur && !s.curInMap {
		s.ids[s.curH] = s.curIx // jobs interleave: the current one joins the map
	}
	h := maphash.String(s.seed, id)
	ix, seen := s.ids[h]
	if !seen {
		if s.slots%jobChunk == 0 {
			// The first chunk grows as jobs come (a small log, a
			// one-row check, costs little); later ones are whole, and
			// one already counted (Options.Live) is reused.
			var c []jobState
			switch n := len(s.spares); {
			case n > 0:
				c, s.spares = s.spares[n-1], s.spares[:n-1]
			case s.slots > 0:
				c = make([]jobState, 0, jobChunk)
			default:
				c = make([]jobState, 0, 16)
			}
			s.jobs = append(s.jobs, c)
		}
		c := &s.jobs[len(s.jobs)-1]
		*c = append(*c, jobState{firstGroup: -1, second: -1, open: true})
		ix = s.slots
		s.slots++
	}
	s.curJob, s.curIx, s.curH, s.hasCur, s.curInMap = id, ix, h, true, seen
	return ix
}

// MissesDeadline is the one deadline-miss rule: the policy stops the job
// for its deadline. Either its decision for the row is `refuse:
// deadline` (logged, or replayed by check), or the row is a sent attempt
// that timed out at the end of what was left of the deadline: spent, the
// job's spend through this attempt (ledgerfile.AddSpent; its own delay
// and elapsed included), reaches the deadline. The writer rounds each
// duration to its millisecond (ledgerfile.WriteResolution), so the reach
// is judged within that rounding: half a millisecond per duration summed
// (terms). Note text is never read.
func MissesDeadline(decision string, r *ledgerfile.Row, spent time.Duration, terms int, deadline time.Duration) bool {
	if decision == deadlineRefusal {
		return true
	}
	if deadline <= 0 || !r.WasSent() || r.Outcome != admit.Timeout {
		return false
	}
	return spent+time.Duration(terms)*ledgerfile.WriteResolution/2 >= deadline
}

var deadlineRefusal = admit.Refuse(admit.ReasonDeadline).String()

func (s *Summarizer) addJobRow(js *jobState, gi int32, r *ledgerfile.Row, f *rowFacts, decision string) {
	js.seen++
	attempt := int32(r.Attempt)
	if attempt == 0 {
		attempt = js.seen
	}
	if js.firstGroup < 0 {
		js.firstGroup = gi
		js.allCost = true
	} else if gi != js.firstGroup && gi != js.second && (js.more == 0 || !slices.Contains(s.more[js.more], gi)) {
		switch {
		case js.second < 0:
			js.second = gi
		case js.more == 0 && len(s.freeMore) > 0: // a counted job's (Options.Live)
			n := len(s.freeMore)
			js.more, s.freeMore = s.freeMore[n-1], s.freeMore[:n-1]
			s.more[js.more] = append(s.more[js.more][:0], gi)
		case js.more == 0 && len(s.freeMore) > 0: // a counted job's (Options.Live)
			n := len(s.freeMore)
			js.more, s.freeMore = s.freeMore[n-1], s.freeMore[:n-1]
			s.more[js.more] = append(s.more[js.more][:0], gi)
		case js.more == 0:
			js.more = int32(len(s.more))
			s.more = append(s.more, []int32{gi})
		default:
			s.more[js.more] = append(s.more[js.more], gi)
		}
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
		// The job's span: its earliest submit to its latest end, whatever
		// order its rows come in.
		start := r.TS.UnixNano()
		end := start
		if sent {
			end += int64(ledgerfile.Kept(r.Elapsed))
		}
		if !js.hasTS || start < js.start {
			js.start = start
		}
		if !js.hasTS || end > js.end {
			js.end = end
		}
		js.hasTS = true
	}
	if attempt >= js.maxAttempt {
		js.lastGroup = gi // the job's last row decides an end that is not an answer
	}

	// Seed 000: a non-ok attempt before the job's last attempt is wasted.
	// The last attempt is only known once a later one appears, so the
	// current last row waits as a candidate.
	switch {
	case attempt > js.maxAttempt:
		if js.cand {
			s.countWasted(s.seats.keys[js.candSeat], js.candOutcome, js.candGroup, js.candTokens, js.candUSD)
		}
		js.maxAttempt = attempt
		js.cand = waste
		if waste {
			js.candSeat, _ = s.seats.of(r.Seat)
			js.candOutcome, js.candGroup, js.candTokens = oi, gi, r.Tokens
			js.candUSD = r.CostUSD
			if !r.HasCost {
				js.candUSD = math.NaN() // unpriced: countWasted knows it so
			}
		}
	case waste:
		usd := r.CostUSD
		if !r.HasCost {
			usd = math.NaN()
		}
		s.countWasted(r.Seat, oi, gi, r.Tokens, usd)
	}

	before := js.spend.Time
	if sent {
		ledgerfile.AddSpent(&js.spend, r)
		if r.HasCost {
			js.usd = js.usd.Add(f.usd)
		}
		js.terms += 2
		if f.billing.Billed() {
			js.billed++
		}
		if !r.HasCost {
			js.allCost = false
		}
		if !js.anySent || attempt >= js.sentAttempt {
			js.anySent, js.sentAttempt, js.sentOutcome = true, attempt, oi
			js.sentAmbig = oi == serverErrorIndex && f.billing == admit.Ambiguous
		}
	}
	if !js.missed && MissesDeadline(decision, r, js.spend.Time, int(js.terms), s.opts.Deadline) {
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
	switch {
	case oi == okIndex && (!js.kept || attempt > js.keptAttempt):
		if js.kept {
			s.taxKept(js) // a later answer is kept
		}
		js.kept, js.keptAttempt, js.keptGroup = true, attempt, gi
		js.keptTokens, js.keptUSD, js.keptUncost, js.keptCost = r.Tokens, r.CostUSD, uncachedUSD(r), r.HasCost
		js.keptSent = int32(js.spend.Attempts)
		if s.good != nil {
			js.keptMet = s.good.meets(r)
		}
		// Elapsed holds the wait: the gate charges wait + gen = elapsed.
		js.keptTime = admit.AddDuration(before, admit.AddDuration(ledgerfile.Kept(r.Delay), ledgerfile.Kept(r.Elapsed)))
	default:
		s.tax(gi, r.Tokens, f.usd, f.uncached, r.HasCost)
	}
	if !s.opts.NoStream {
		if u, ok := tpotUnits(r); ok {
			s.tpot.addUnits(u)
		}
		if u, ok := tpsUnits(r); ok {
			s.outTPS.addUnits(u)
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
			s.rateSeconds = s.rateSeconds.Add(DecOf(uint64(micros(r.Elapsed)-micros(r.Wait)), -secExp))
			s.rateRows++
		}
	}
}

// taxKept takes a job's kept answer so far into the retry tax.
func (s *Summarizer) taxKept(js *jobState) {
	var usd, uncached Dec
	if js.keptCost {
		usd, uncached = decAmount(js.keptUSD), decAmount(js.keptUncost)
	}
	s.tax(js.keptGroup, js.keptTokens, usd, uncached, js.keptCost)
}

// wasteAcc sums one seat's and outcome's wasted calls.
type wasteAcc struct {
	calls, tokens int64
	usd           Dec
	paid          bool // a row of it had a cost: else its USD is unknown, not 0
}

func (s *Summarizer) countWasted(seat string, oi uint8, gi int32, tokens int64, usd float64) {
	if seat == "" {
		seat = NoValue
	}
	k := wasteKey{seat, oi}
	w := s.wasted[k]
	if w == nil {
		w = &wasteAcc{}
		s.wasted[k] = w
		s.wasteKeys = append(s.wasteKeys, k)
	}
	w.calls++
	w.tokens = admit.AddTokens(w.tokens, tokens)
	if !math.IsNaN(usd) { // NaN: the row had no cost
		w.usd = w.usd.Add(decAmount(usd))
		w.paid = true
	}
	s.groups[gi].g.WastedCalls++
	s.all.g.WastedCalls++
}

// jobEnd is the job's end state, one rule with its kept answer: job_end
// of its last row that carries one; otherwise succeeded when it has an
// answer, else as the writer would have written it (admit.EndAfter,
// judged by its last sent attempt: a timeout, a wait-cap cut or a slow
// 5xx may have completed server-side, so its fate is unknown, seed 004).
func (js *jobState) jobEnd() string {
	if js.end8 != 0 {
		return endCodes[js.end8]
	}
	if js.kept {
		return ledgerfile.JobSucceeded
	}
	return admit.EndAfter(js.anySent, admit.Outcomes[js.sentOutcome], js.sentAmbig)
}

// finishJob counts a job at the end of its log, and says how it ended.
func (s *Summarizer) finishJob(js *jobState) string {
	js.open = false
	touch := func(g *groupAcc) {
		g.g.Jobs++
		if js.fallback {
			g.g.FallbackJobs++
		}
	}
	touch(s.groups[js.firstGroup])
	if js.second >= 0 {
		touch(s.groups[js.second])
	}
	if js.more != 0 {
		for _, gi := range s.more[js.more] {
			touch(s.groups[gi])
		}
	}
	touch(s.all)

	end := js.jobEnd()
	if js.kept && end != ledgerfile.JobSucceeded {
		// A job that did not succeed kept no answer (it succeeded, and
		// then failed: a client asked again): every attempt is tax.
		s.taxKept(js)
		js.kept = false
	}
	if s.good != nil {
		s.good.job(end == ledgerfile.JobSucceeded, js.kept && js.keptMet)
	}
	decider := js.lastGroup
	if js.kept {
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
	if js.hasTS {
		s.jobE2E.addDur(time.Duration(js.end - js.start))
	}
	s.jobs1++
	usd := js.usd.Float64()
	a, b := float64(js.spend.Attempts), float64(js.billed)
	s.sumAttempts, s.sqAttempts = s.sumAttempts+a, s.sqAttempts+a*a
	s.sumBilled, s.sqBilled = s.sumBilled+b, s.sqBilled+b*b
	s.sumUSD, s.sqUSD = s.sumUSD+usd, s.sqUSD+usd*usd
	if js.spend.Attempts == 0 {
		return end // refused before anything went out: no time or tokens to speak of
	}
	s.jobTime.addDur(js.spend.Time)
	s.jobTokens.addUnits(js.spend.Tokens)
	if js.allCost {
		s.jobUSD.addDec(js.usd)
	}
	return end
}
