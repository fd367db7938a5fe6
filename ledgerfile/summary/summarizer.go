// The Summarizer: rows in (Add), groups and their accumulators.

package summary

import (
	"fmt"
	"hash/maphash"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// Summarizer aggregates rows as they stream past (Add, then Close once):
// it keeps exact counts of the values percentiles need and a few numbers
// per job still open, and a hash per job id (see jobs below).
type Summarizer struct {
	opts         Options
	groups       []*groupAcc
	groupIx      keyIndex // groups' keys
	listed       int      // the groups Options.Groups named, each once
	lastGroup    string
	lastGroupIx  int32
	hasLastGroup bool
	all          *groupAcc

	// A job is every row that shares its id (DESIGN.md), job_end or not:
	// a row after a job's job_end row is still that job's. Jobs live in
	// chunks of jobChunk (growing copies at most the first), by index. A
	// job's state is kept past its job_end row while endWindow more jobs
	// end, so a late row rejoins it, and is counted then; only its id's
	// 64-bit hash stays after that (ids), to count each id once: memory
	// follows the jobs open at once and a few bytes per job id, never the
	// rows. (Two ids of one hash would be one job: at a million ids, a
	// chance of about 3e-8, with a seed no log can aim at.)
	jobs    [][]jobState
	free    []int32
	ids     map[uint64]int32 // hash of an open job's id → its slot
	seed    maphash.Seed
	ended   []endedJob // ring of jobs past their job_end row, oldest first at endHead
	endHead int
	endSeq  uint32
	// The current job's rows are adjacent, as they are unless jobs
	// interleave: they skip the hash.
	curJob string
	curIx  int32
	hasCur bool
	good   *goodput // Options.Goodput
	seats  keyIndex // wasted-call seat names

	wasted    map[wasteKey]*Wasted
	wasteKeys []wasteKey

	okElapsed, okWait values
	tpot, outTPS, itl values
	contentWait       values
	asideWait         [numOutcomes]values
	// Per-job distributions, gathered as jobs end.
	jobTime, jobTTS, jobTokens, jobUSD, jobAPS, jobE2E values
	rateTokens                                         int64
	rateSeconds                                        float64
	rateRows                                           int64
	// Σ and Σ² of per-job attempts, billed attempts and USD.
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
	itl                             values
	sITL                            Sorted
	outcomes                        [numOutcomes]int64
	refusals                        map[string]int64
	tokensAll, keptTokens           int64
	usdAll, keptUSD                 float64
	costRows                        int64
	cache                           cacheAcc
}

// cacheAcc sums CacheFigures' parts.
type cacheAcc struct {
	retries, rewritten        int64
	cached, cachedOf          int64
	written                   int64
	reasoning, reasoningOf    int64
	saved                     float64
	savedRows                 int64
	uncachedAll, keptUncached float64
}

func (c *cacheAcc) add(r *ledgerfile.Row) {
	if r.HasCacheWrite {
		c.written = admit.AddTokens(c.written, r.CacheWriteTokens)
		if r.Attempt > 1 {
			c.retries++
			if r.CacheWriteTokens > 0 {
				c.rewritten++
			}
		}
	}
	if r.HasCached {
		c.cached = admit.AddTokens(c.cached, r.CachedTokens)
		c.cachedOf = admit.AddTokens(c.cachedOf, r.PromptTokens)
	}
	if r.HasReasoning {
		c.reasoning = admit.AddTokens(c.reasoning, r.ReasoningTokens)
		c.reasoningOf = admit.AddTokens(c.reasoningOf, r.CompletionTokens)
	}
	if r.HasCost {
		if r.UncachedUSD > 0 {
			c.saved += r.UncachedUSD - r.CostUSD
			c.savedRows++
		}
		c.uncachedAll = admit.AddUSD(c.uncachedAll, uncachedUSD(r))
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
		seed:   maphash.MakeSeed(),
		wasted: map[wasteKey]*Wasted{},
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

// Add counts one row under the decision it records; file names it for
// rows without a job id (each of which is a job of its own).
func (s *Summarizer) Add(r *ledgerfile.Row, file string) {
	s.add(r, file, LoggedDecision(r), !r.WasSent())
}

// add counts one row as Add does, but judges it by decision, which may be
// another policy's decision for it (check's replay), and refused, whether
// that decision refuses it (Refused): the refused rate and the
// deadline-miss rule read them, every other figure what the row records.
func (s *Summarizer) add(r *ledgerfile.Row, file, decision string, refused bool) {
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
	s.addRow(g, r, f)
	s.addRow(s.all, r, f)

	if r.Job == "" {
		single := jobState{firstGroup: -1}
		if r.HasSpent {
			single.spend = admit.Spent{Time: r.SpentS, Tokens: r.SpentTokens, Attempts: r.Used, USD: r.SpentUSD}
		}
		s.addJobRow(&single, gi, r, f, decision)
		s.finishJob(&single)
		return
	}
	ix := s.jobFor(r.Job)
	js := &s.jobs[ix/jobChunk][ix%jobChunk]
	js.endSeq = 0 // a row after the job's job_end row: the job goes on
	s.addJobRow(js, gi, r, f, decision)
	if r.JobEnd != "" {
		s.endJob(ix, js)
	}
}

// rowFacts are what several figures ask of a row, worked out once.
type rowFacts struct {
	sent    bool
	oi      uint8
	billing admit.Billing
}

func (s *Summarizer) factsOf(r *ledgerfile.Row) rowFacts {
	f := rowFacts{sent: r.WasSent(), oi: uint8(outcomeIndex(r.Outcome))}
	if f.sent {
		f.billing = RowBilling(r, s.opts.SlowAfter)
	}
	return f
}

func (s *Summarizer) addRow(g *groupAcc, r *ledgerfile.Row, f rowFacts) {
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
	if !g.merged {
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
	}
	oi := f.oi
	g.outcomes[oi]++
	g.tokensAll = admit.AddTokens(g.tokensAll, r.Tokens)
	if r.HasCost {
		g.usdAll = admit.AddUSD(g.usdAll, r.CostUSD)
		g.costRows++
	}
	g.cache.add(r)
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
