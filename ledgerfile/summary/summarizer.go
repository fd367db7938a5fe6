// The Summarizer: rows in (Add), groups and their accumulators.

package summary

import (
	"fmt"
	"hash/maphash"
	"strconv"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// Summarizer aggregates rows as they stream past (Add, then Close once):
// it keeps exact counts of the values percentiles need, exact sums, and a
// few numbers per job of the log being read (see jobs below).
type Summarizer struct {
	opts         Options
	groups       []*groupAcc
	groupIx      keyIndex // groups' keys
	listed       int      // the groups Options.Groups named, each once
	lastGroup    string
	lastGroupIx  int32
	hasLastGroup bool
	all          *groupAcc

	// A job is every row of its id within one log, in any order, whatever
	// other jobs' rows stand between them (DESIGN.md, "A job, exactly"):
	// a row after the job's job_end row is still that job's, and the same
	// id in another log is another job. So a job is counted when its log
	// ends (EndLog, a row of another log, or Close), and memory follows
	// the jobs of one log, never its rows. Jobs live in chunks of
	// jobChunk (growing copies at most the first), by index.
	// A job id is looked up by its 64-bit hash (seed: no log can aim
	// at it), not kept: two ids of one hash in one log would be one job,
	// a chance of about 3e-8 at a million ids.
	// With Options.Live a job is counted at its job_end row, in the
	// order jobs began, as EndLog would count it: the figures are the
	// same, and memory follows the jobs from the oldest still in flight
	// (head), whose chunks are reused as they are counted.
	jobs   [][]jobState
	slots  int32            // jobs of the log so far, counted or not
	head   int32            // Live: the first job not yet counted
	spares [][]jobState     // Live: counted chunks, to reuse (at most two)
	ids    map[uint64]int32 // the log's job ids' hashes → their slots
	seed   maphash.Seed
	more   [][]int32 // groups a job touched past its first two (jobState.more); more[0] unused
	// freeMore are entries of more that counted jobs (Live) left.
	freeMore []int32
	file     string // the log being read
	// The current job's rows are adjacent, as they are unless jobs
	// interleave: they skip the map, and the job joins it (curH) only
	// when another job's row comes between.
	curJob   string
	curIx    int32
	curH     uint64
	hasCur   bool
	curInMap bool
	good     *goodput // Options.Goodput
	draw     *drawAcc // Options.Draw
	seats    keyIndex // wasted-call seat names
	// the last cost converted (amount)
	lastAmt float64
	lastDec Dec
	hasAmt  bool

	wasted    map[wasteKey]*wasteAcc
	wasteKeys []wasteKey

	okElapsed, okWait values
	tpot, outTPS, itl values
	contentWait       values
	asideWait         [numOutcomes]values
	// Per-job distributions, gathered as jobs end.
	jobTime, jobTTS, jobTokens, jobUSD, jobAPS, jobE2E values
	rateTokens                                         int64
	rateSeconds                                        Dec
	rateRows                                           int64
	// Σ and Σ² of per-job attempts, billed attempts and USD, for the
	// standard errors (estimates, never compared with a limit).
	sumAttempts, sqAttempts, sumBilled, sqBilled, sumUSD, sqUSD float64

	jobs1, misses int64
	rows, before  int64
	refusedRows   int64
	steps         *steps
	budgetRefused int64
	done          bool

	brk breakerAcc // events.go
}

type groupAcc struct {
	g Group
	// merged: the values are not kept here but merged from the groups at
	// the end (the "(all)" group), so no value is held twice while streaming.
	merged                          bool
	wait, ttfb, elapsed, tokens     values
	sWait, sTTFB, sElapsed, sTokens Sorted
	itl, gen                        values
	sITL, sGen                      Sorted
	outcomes                        [numOutcomes]int64
	refusals                        map[string]int64
	// Sums over sent attempts, and over the ones that did not produce
	// their job's kept answer (the retry tax), each summed as it is (a
	// token sum saturates at admit.MaxTokens; saturated says one did).
	tokensAll, taxTokens int64
	usdAll, taxUSD       Dec
	costRows             int64
	saturated            bool
	cache                cacheAcc
}

// cacheAcc sums CacheFigures' parts.
type cacheAcc struct {
	retries, rewritten     int64
	cached, cachedOf       int64
	written                int64
	reasoning, reasoningOf int64
	// savedCost and savedUncached are Σ cost_usd and Σ uncached_usd over
	// the rows with uncached_usd: what the cache saved is their difference.
	savedCost, savedUncached Dec
	savedRows                int64
	uncachedAll, taxUncached Dec
	saturated                bool
}

// addTokens is a + b saturating at admit.MaxTokens, setting *sat when the
// sum reaches it.
func addTokens(a, b int64, sat *bool) int64 {
	n := admit.AddTokens(a, b)
	if n == admit.MaxTokens && b > 0 {
		*sat = true
	}
	return n
}

func (c *cacheAcc) add(r *ledgerfile.Row, f *rowFacts) {
	if r.HasCacheWrite {
		c.written = addTokens(c.written, r.CacheWriteTokens, &c.saturated)
		if r.Attempt > 1 {
			c.retries++
			if r.CacheWriteTokens > 0 {
				c.rewritten++
			}
		}
	}
	if r.HasCached {
		c.cached = addTokens(c.cached, r.CachedTokens, &c.saturated)
		c.cachedOf = addTokens(c.cachedOf, r.PromptTokens, &c.saturated)
	}
	if r.HasReasoning {
		c.reasoning = addTokens(c.reasoning, r.ReasoningTokens, &c.saturated)
		c.reasoningOf = addTokens(c.reasoningOf, r.CompletionTokens, &c.saturated)
	}
	if r.HasCost {
		if r.UncachedUSD > 0 {
			c.savedCost = c.savedCost.Add(f.usd)
			c.savedUncached = c.savedUncached.Add(f.uncached)
			c.savedRows++
		}
		c.uncachedAll = c.uncachedAll.Add(f.uncached)
	}
}

type wasteKey struct {
	seat    string
	outcome uint8
}

// New starts an empty summary.
func New(opts Options) *Summarizer {
	if opts.By == "" {
		opts.By = BySeat
	}
	s := &Summarizer{
		opts:   opts,
		ids:    map[uint64]int32{},
		more:   [][]int32{nil},
		seed:   maphash.MakeSeed(),
		wasted: map[wasteKey]*wasteAcc{},
		all:    &groupAcc{g: Group{Key: AllGroup}, refusals: map[string]int64{}, merged: true},
	}
	if opts.OnlyEndToEnd || opts.OnlyGroups {
		for _, v := range []*values{&s.okElapsed, &s.okWait, &s.contentWait, &s.jobTime, &s.jobTTS, &s.jobTokens, &s.jobUSD, &s.jobAPS} {
			v.off = true
		}
		for i := range s.asideWait {
			s.asideWait[i].off = true
		}
	}
	if opts.OnlyGroups {
		s.jobE2E.off = true
	}
	if opts.Goodput {
		s.good = newGoodput(opts.Thresholds)
	}
	if opts.Draw {
		s.draw = newDrawAcc()
	}
	if opts.Steps > 0 {
		s.steps = &steps{from: opts.StepsFrom, every: opts.Steps}
	}
	for _, g := range opts.Groups {
		s.group(g)
	}
	s.listed = len(s.groups)
	return s
}

// GroupKey is the group a row counts in under the summarizer's grouping:
// views that draw per group (report --html) ask here rather than repeat
// the rule.
func (s *Summarizer) GroupKey(r *ledgerfile.Row, file string) string {
	switch s.opts.By {
	case ByModel:
		if r.Model == "" {
			return NoValue
		}
		return r.Model
	case ByJob:
		if r.Job == "" {
			return fmt.Sprintf("%s:%d", file, r.Line)
		}
		return r.Job
	case ByOutcome:
		if !r.WasSent() {
			return RefusedGroup
		}
		return string(admit.Outcomes[outcomeIndex(r.Outcome)])
	default:
		if r.Seat == "" {
			return NoValue
		}
		return r.Seat
	}
}

func (s *Summarizer) group(key string) int32 {
	if s.hasLastGroup && key == s.lastGroup {
		return s.lastGroupIx // runs of rows on one seat skip the lookup
	}
	i, found := s.groupIx.of(key)
	if !found {
		g := &groupAcc{g: Group{Key: key}, refusals: map[string]int64{}}
		if s.opts.OnlyEndToEnd {
			g.wait.off, g.ttfb.off, g.elapsed.off, g.tokens.off = true, true, true, true
		}
		s.groups = append(s.groups, g)
	}
	s.lastGroup, s.lastGroupIx, s.hasLastGroup = key, i, true
	return i
}

// keyIndex numbers keys in the order they first come.
type keyIndex struct {
	keys []string
	ix   map[string]int32
}

// of is key's number; found is false for a key numbered just now.
func (x *keyIndex) of(key string) (i int32, found bool) {
	if len(x.keys) <= 8 {
		// A few keys: comparing them beats hashing one.
		for i, k := range x.keys {
			if k == key {
				return int32(i), true
			}
		}
	} else if i, ok := x.ix[key]; ok {
		return i, true
	}
	if x.ix == nil {
		x.ix = map[string]int32{}
	}
	i = int32(len(x.keys))
	x.keys = append(x.keys, key)
	x.ix[key] = i
	return i, false
}

// Add counts one row under the decision it records; file names the log
// it came from: a job is every row of its id within one log, and a row
// without a job id is a job of its own. The rows of one log come
// together: a row of another log ends the one before (EndLog).
func (s *Summarizer) Add(r *ledgerfile.Row, file string) {
	s.add(r, file, LoggedDecision(r), !r.WasSent())
}

// EndLog says the log being read has ended: its jobs are counted, and a
// job id that comes again is a job of the next log (the same log read
// twice is two logs).
func (s *Summarizer) EndLog() {
	for c := range s.jobs {
		for i := range s.jobs[c] {
			if js := &s.jobs[c][i]; js.open {
				s.endJob(int32(c*jobChunk+i), js)
			}
		}
		s.jobs[c] = nil // let the chunk go as soon as it is counted
	}
	s.jobs, s.slots, s.head, s.spares, s.hasCur = nil, 0, 0, nil, false
	s.more, s.freeMore = s.more[:min(len(s.more), 1)], s.freeMore[:0]
	clear(s.ids)
	if s.draw != nil {
		clear(s.draw.traces)
	}
}

// add counts one row as Add does, but judges it by decision, which may be
// another policy's decision for it (check's replay), and refused, whether
// that decision refuses it (Refused): the refused rate and the
// deadline-miss rule read them, every other figure what the row records.
func (s *Summarizer) add(r *ledgerfile.Row, file, decision string, refused bool) {
	if file != s.file {
		s.EndLog()
		s.file = file
	}
	s.brk.addRow(r)
	if !s.opts.Since.IsZero() && !r.TS.IsZero() && r.TS.Before(s.opts.Since) {
		s.before++
		return
	}
	s.rows++
	if s.steps != nil {
		s.steps.add(r)
	}
	if s.good != nil {
		s.good.window(r)
	}
	if refused {
		s.refusedRows++
		if decision == budgetRefusal {
			s.budgetRefused++
		}
	}
	gi := s.group(s.GroupKey(r, file))
	g := s.groups[gi]
	f := s.factsOf(r)
	s.addRow(g, r, &f)
	s.addRow(s.all, r, &f)
	if s.draw != nil {
		s.draw.bucket(r, f.sent)
	}

	if r.Job == "" {
		single := jobState{firstGroup: -1, second: -1}
		if r.HasSpent {
			single.spend = admit.Spent{Time: r.SpentS, Tokens: r.SpentTokens, Attempts: r.Used, USD: r.SpentUSD}
			single.usd = decAmount(r.SpentUSD)
		}
		s.addJobRow(&single, gi, r, &f, decision)
		end := s.finishJob(&single)
		if s.draw != nil {
			t := &trace{Trace: Trace{ID: file + ":" + strconv.Itoa(r.Line)}} // a row without a job id is a job of its own
			t.add(r, f.sent)
			s.draw.finish(t, end)
		}
		return
	}
	ix := s.jobFor(r.Job)
	js := &s.jobs[ix/jobChunk][ix%jobChunk]
	s.addJobRow(js, gi, r, &f, decision)
	if s.draw != nil {
		s.draw.traceOf(ix, r.Job).add(r, f.sent)
	}
	if s.opts.Live && r.JobEnd != "" {
		if s.curInMap {
			delete(s.ids, s.curH)
		}
		js.ended, s.hasCur = true, false
		s.countEnded()
	}
}

// countEnded counts the ended jobs from the oldest on, up to the first
// still in flight (Options.Live).
func (s *Summarizer) countEnded() {
	for s.head < s.slots {
		c, i := s.head/jobChunk, s.head%jobChunk
		js := &s.jobs[c][i]
		if !js.ended {
			return
		}
		s.endJob(s.head, js)
		if js.more != 0 {
			s.freeMore = append(s.freeMore, js.more)
		}
		if s.head++; i == jobChunk-1 {
			// Two: the oldest job in flight may end just as the newest
			// fills its chunk, before the next chunk is taken.
			if len(s.spares) < 2 {
				s.spares = append(s.spares, s.jobs[c][:0])
			}
			s.jobs[c] = nil
		}
	}
}

// endJob counts the job in slot ix.
func (s *Summarizer) endJob(ix int32, js *jobState) {
	end := s.finishJob(js)
	if s.draw != nil {
		s.draw.finish(s.draw.traceOf(ix, ""), end)
		delete(s.draw.traces, ix)
	}
}

// rowFacts are what several figures ask of a row, worked out once.
type rowFacts struct {
	sent          bool
	oi            uint8
	billing       admit.Billing
	usd, uncached Dec // cost_usd, and uncached_usd or else cost_usd (uncachedUSD), as the row wrote them
}

// amount is decAmount(x), remembering the last one: a seat's rows
// mostly cost the same (a simulated model's fixed token counts).
func (s *Summarizer) amount(x float64) Dec {
	if x != s.lastAmt || !s.hasAmt {
		s.lastAmt, s.lastDec, s.hasAmt = x, decAmount(x), true
	}
	return s.lastDec
}

func (s *Summarizer) factsOf(r *ledgerfile.Row) rowFacts {
	f := rowFacts{sent: r.WasSent(), oi: uint8(outcomeIndex(r.Outcome))}
	if f.sent {
		f.billing = RowBilling(r, s.opts.SlowAfter)
		if r.HasCost {
			f.usd = s.amount(r.CostUSD)
			f.uncached = f.usd
			if r.UncachedUSD > 0 {
				f.uncached = decAmount(r.UncachedUSD)
			}
		}
	}
	return f
}

func (s *Summarizer) addRow(g *groupAcc, r *ledgerfile.Row, f *rowFacts) {
	g.g.Rows++
	if r.Holdout {
		g.g.HeldOut++
	}
	if !f.sent {
		// A refusal is a row that was not sent (DESIGN.md), counted in
		// total and by its reason alike; a sent attempt the wait cap cut
		// live says refuse: queue wait, and counts under its outcome.
		g.g.Refused++
		g.refusals[RefusalReason(r)]++
		return
	}
	g.g.Attempts++
	if !g.merged && !s.opts.OnlyEndToEnd { // OnlyEndToEnd: each group's values are off
		g.wait.addDur(r.Wait)
		g.elapsed.addDur(r.Elapsed)
		g.tokens.addUnits(r.Tokens)
		if r.HasTTFB {
			g.ttfb.addDur(r.TTFB)
		}
		if !s.opts.NoStream {
			if d, ok := itlDur(r); ok {
				g.itl.addDur(d)
			}
		}
		if s.draw != nil {
			if d, ok := Gen(r); ok {
				g.gen.addDur(d)
			}
		}
	}
	oi := f.oi
	g.outcomes[oi]++
	g.tokensAll = addTokens(g.tokensAll, r.Tokens, &g.saturated)
	if r.HasCost {
		g.usdAll = g.usdAll.Add(f.usd)
		g.costRows++
	}
	g.cache.add(r, f)
	billed := f.billing.Billed()
	if billed {
		g.g.Billed++
	}
	if oi != okIndex {
		g.g.FailedAttempts++
		if billed {
			g.g.BilledFailures++
		}
	}
}

// tax takes a sent row that did not produce its job's kept answer into
// its group's retry tax (and the whole's).
func (s *Summarizer) tax(gi int32, tokens int64, usd, uncached Dec, hasCost bool) {
	for _, g := range [...]*groupAcc{s.groups[gi], s.all} {
		g.taxTokens = addTokens(g.taxTokens, tokens, &g.saturated)
		if hasCost {
			g.taxUSD = g.taxUSD.Add(usd)
			g.cache.taxUncached = g.cache.taxUncached.Add(uncached)
		}
	}
}
