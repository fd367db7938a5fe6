package summary

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"retrygate/admit"
	"retrygate/ledgerfile"
)

// MinRows is how many rows a figure should rest on before anyone tunes a
// timeout or a cap from it; fewer is flagged, never hidden.
const MinRows = 30

// GroupBy is how report splits rows.
type GroupBy string

const (
	BySeat    GroupBy = "seat"
	ByModel   GroupBy = "model"
	ByJob     GroupBy = "job"
	ByOutcome GroupBy = "outcome"
)

// ParseGroupBy accepts seat, model, job or outcome.
func ParseGroupBy(s string) (GroupBy, error) {
	switch g := GroupBy(s); g {
	case BySeat, ByModel, ByJob, ByOutcome:
		return g, nil
	}
	return "", fmt.Errorf("unknown grouping %q (want seat, model, job or outcome)", s)
}

// Group keys for rows that do not say.
const (
	NoValue      = "-"       // a row without seat or model
	RefusedGroup = "refused" // --by outcome: rows the gate refused (never sent)
	AllGroup     = "(all)"
)

// Options choose what a Summarizer counts.
type Options struct {
	By GroupBy
	// Since drops rows whose ts is before it; rows without a ts are kept
	// (a hand-written row has no time to judge). Zero keeps every row.
	Since time.Time
	// SlowAfter classifies the billing of failed rows that carry no
	// billing key (admit.BillingOf); 0 treats every 5xx as fast.
	SlowAfter time.Duration
}

// Figure is a number that may be undefined (NaN: nothing to divide by)
// or infinite (attempts per success with no success). JSON writes both
// as null.
type Figure float64

// MarshalJSON writes NaN and ±Inf as null.
func (f Figure) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, v, 'f', -1, 64), nil
}

// Dist is a distribution's exact nearest-rank percentiles (admit.Percentile).
type Dist struct {
	N   int    `json:"n"`
	P50 Figure `json:"p50"`
	P75 Figure `json:"p75"`
	P95 Figure `json:"p95"`
	P99 Figure `json:"p99"`
	Max Figure `json:"max"`
	// Values are every value, sorted ascending: thresholds need them whole.
	Values []float64 `json:"-"`
}

// newDist reads the percentiles of values, sorted ascending.
func newDist(values []float64) Dist {
	d := Dist{N: len(values), Values: values}
	p := func(q float64) Figure { return Figure(admit.Percentile(values, q)) }
	d.P50, d.P75, d.P95, d.P99, d.Max = p(50), p(75), p(95), p(99), p(100)
	return d
}

// Tax is the retry tax (seed 004): what attempts that did not produce the
// kept result cost, and their share of everything sent.
type Tax struct {
	Tokens      int64  `json:"tokens"`
	TokensShare Figure `json:"tokens_share"`
	USD         Figure `json:"usd"`       // null when no sent row carries cost_usd
	USDShare    Figure `json:"usd_share"` // of the USD of sent rows with a cost
	CostRows    int64  `json:"cost_rows"` // sent rows that carry cost_usd
}

// Group is one group's figures. ledgerfile.Row-level figures (attempts, percentiles,
// outcomes, billing, tax, wasted calls) count each row in its own group.
// A job counts in every group it touched (Jobs, FallbackJobs); its answer
// and its end state count in the group of the row that decided them: the
// kept ok attempt, or the job's last row.
type Group struct {
	Key      string `json:"group"`
	Rows     int64  `json:"rows"`
	Attempts int64  `json:"attempts"` // sent
	Refused  int64  `json:"refused"`  // rows the gate refused (not sent)
	HeldOut  int64  `json:"held_out"` // rows marked holdout=true

	Jobs      int64 `json:"jobs"`
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Unknown   int64 `json:"unknown"`
	Cancelled int64 `json:"cancelled"`

	Wait    Dist `json:"wait_s"`
	TTFB    Dist `json:"ttfb_s"`
	Elapsed Dist `json:"elapsed_s"`
	Tokens  Dist `json:"tokens"`

	Outcomes map[string]int64 `json:"outcomes"`
	Refusals map[string]int64 `json:"refusals"`

	AttemptsPerSuccess Figure `json:"attempts_per_success"`
	RetryRatio         Figure `json:"retry_ratio"`
	RetryTax           Tax    `json:"retry_tax"`
	WastedCalls        int64  `json:"wasted_calls"`

	FailedAttempts      int64  `json:"failed_attempts"`
	BilledFailures      int64  `json:"billed_failures"`
	BillableFailureRate Figure `json:"billable_failure_rate"`
	UnknownRate         Figure `json:"unknown_rate"`
	FallbackJobs        int64  `json:"fallback_jobs"`
	FallbackRate        Figure `json:"fallback_rate"`
}

// Wasted is seed 000's wasted-call query: sent attempts before their job's
// last attempt whose outcome was not ok, by seat and outcome.
type Wasted struct {
	Seat    string `json:"seat"`
	Outcome string `json:"outcome"`
	Calls   int64  `json:"wasted_calls"`
	Tokens  int64  `json:"tokens"`
	USD     Figure `json:"usd"`
}

// JobFigures are per-job distributions over every job, for tune and check.
type JobFigures struct {
	Jobs int64 `json:"jobs"`
	// Time is each job's Σ(delay_s + elapsed_s) over its sent attempts;
	// Time, Tokens and USD leave out jobs that sent nothing.
	Time []float64 `json:"-"`
	// TimeToSuccess is, for each job with a kept answer, the time the gate
	// charged it: earlier sent attempts' delay + elapsed, then the kept
	// attempt's wait + elapsed (the gate's check 3).
	TimeToSuccess []float64 `json:"-"`
	// Tokens is each job's Σ tokens over its sent attempts.
	Tokens []float64 `json:"-"`
	// USD is each job's Σ cost_usd, for jobs whose every sent attempt has one.
	USD []float64 `json:"-"`
	// AttemptsPerSuccess is, for each succeeded job, its sent attempts.
	AttemptsPerSuccess []float64 `json:"-"`
}

// Summary is everything report prints.
type Summary struct {
	By     GroupBy  `json:"by"`
	Rows   int64    `json:"rows"`
	Before int64    `json:"rows_before_since"` // rows dropped by Since
	Groups []*Group `json:"groups"`
	All    *Group   `json:"all"`
	Wasted []Wasted `json:"wasted_calls"`
	Jobs   JobFigures
	// OK holds the ok attempts' figures recommendations rest on.
	OK OKFigures `json:"-"`
}

// OKFigures are the sent attempts that returned an answer.
type OKFigures struct {
	Elapsed []float64 // sorted
	Wait    []float64 // sorted
	// Rate: Σ completion_tokens ÷ Σ(elapsed − wait) over ok rows with a
	// token split and elapsed > wait (seed 001's generation rate).
	RateTokens  int64
	RateSeconds float64
	RateRows    int64
}

// Summarizer aggregates rows as they stream past: it keeps float64 slices
// only for the values exact percentiles need, and a few numbers per job.
type Summarizer struct {
	opts         Options
	groups       []*groupAcc
	groupIdx     map[string]int32
	lastGroup    string
	lastGroupIx  int32
	hasLastGroup bool
	all          *groupAcc

	// Open jobs live in fixed-size chunks (growing never copies them) and
	// their slots are reused once a job ends: a job ends at its job_end row
	// (the log's contract: it is on a job's last row only), so memory
	// follows the jobs open at once, not every job in the log.
	jobs   [][]jobState
	free   []int32
	jobIdx map[string]int32
	// The current job stays out of the map while its rows are adjacent, as
	// they are unless jobs interleave: most jobs never touch the map.
	curJob   string
	curIx    int32
	hasCur   bool
	curInMap bool
	seats    []string // wasted-call seat names, by index
	seatIx   map[string]int32

	wasted    map[wasteKey]*Wasted
	wasteKeys []wasteKey

	okElapsed, okWait values
	// Per-job distributions, gathered as jobs end: time, time to success,
	// tokens, USD, attempts per success.
	jobTime, jobTTS, jobTokens, jobUSD, jobAPS values
	rateTokens                                 int64
	rateSeconds                                float64
	rateRows                                   int64

	jobsFig JobFigures
	scratch radixScratch

	rows, before int64
	done         bool
}

type groupAcc struct {
	g Group
	// merged: the values are not kept here but merged from the groups at
	// the end (the "(all)" group), so no value is held twice while streaming.
	merged                      bool
	wait, ttfb, elapsed, tokens values
	// flat are the values as one sorted slice each, once finished.
	flatWait, flatTTFB, flatElapsed, flatTokens []float64
	outcomes                                    [numOutcomes]int64
	refusals                                    map[string]int64
	tokensAll, keptTokens                       int64
	usdAll, keptUSD                             float64
	costRows                                    int64
	jobsTouched                                 int64
	fallbackJobs                                int64
	succeeded, failed, unkn, cancel             int64
}

const numOutcomes = 9 // len(admit.Outcomes)

func outcomeIndex(o admit.Outcome) int {
	switch o {
	case admit.OK, "":
		return 0
	case admit.ConnError:
		return 1
	case admit.RateLimited:
		return 2
	case admit.ClientError:
		return 3
	case admit.ServerError:
		return 4
	case admit.Timeout:
		return 5
	case admit.WaitCap:
		return 6
	case admit.Reset:
		return 7
	default:
		return 8
	}
}

type wasteKey struct {
	seat    string
	outcome uint8
}

const jobChunk = 4096

// jobState is the little a job needs remembered between its rows.
type jobState struct {
	groups []int32 // groups touched besides the first

	time       float64 // Σ delay + elapsed of sent attempts
	usd        float64
	tokens     int64
	keptTokens int64
	keptUSD    float64
	keptTime   float64 // gate time to the kept answer
	candTokens int64
	candUSD    float64

	firstGroup  int32
	lastGroup   int32
	maxAttempt  int32
	seen        int32 // rows so far, numbering rows without attempt
	sent        int32
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
	end         uint8 // job_end of the latest row carrying one (endCodes)
	fallback    bool
	kept        bool
	allCost     bool
}

var endCodes = []string{"", ledgerfile.JobSucceeded, ledgerfile.JobFailed, ledgerfile.JobUnknown, ledgerfile.JobCancelled}

func endCode(s string) uint8 {
	for i, e := range endCodes {
		if e == s {
			return uint8(i)
		}
	}
	return 0
}

// NewSummarizer starts an empty summary.
func New(opts Options) *Summarizer {
	if opts.By == "" {
		opts.By = BySeat
	}
	s := &Summarizer{
		opts:     opts,
		groupIdx: map[string]int32{},
		jobIdx:   map[string]int32{},
		seatIx:   map[string]int32{},
		wasted:   map[wasteKey]*Wasted{},
		all:      &groupAcc{g: Group{Key: AllGroup}, refusals: map[string]int64{}, merged: true},
	}
	return s
}

func (s *Summarizer) groupKey(r *ledgerfile.Row, file string) string {
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
		if r.Outcome == "" {
			return string(admit.OK)
		}
		return string(r.Outcome)
	default:
		if r.Seat == "" {
			return NoValue
		}
		return r.Seat
	}
}

func (s *Summarizer) group(key string) int32 {
	if s.hasLastGroup && key == s.lastGroup {
		return s.lastGroupIx // runs of rows on one seat skip the map
	}
	i, ok := s.groupIdx[key]
	if ok {
		s.lastGroup, s.lastGroupIx, s.hasLastGroup = key, i, true
		return i
	}
	i = int32(len(s.groups))
	s.groups = append(s.groups, &groupAcc{g: Group{Key: key}, refusals: map[string]int64{}})
	s.groupIdx[key] = i
	s.lastGroup, s.lastGroupIx, s.hasLastGroup = key, i, true
	return i
}

// Add counts one row; file names it for rows without a job id (each of
// which is a job of its own).
func (s *Summarizer) Add(r *ledgerfile.Row, file string) {
	if !s.opts.Since.IsZero() && !r.TS.IsZero() && r.TS.Before(s.opts.Since) {
		s.before++
		return
	}
	s.rows++
	gi := s.group(s.groupKey(r, file))
	g := s.groups[gi]
	s.addRow(g, r)
	s.addRow(s.all, r)

	if r.Job == "" {
		single := jobState{firstGroup: -1}
		s.addJobRow(&single, gi, r)
		s.finishJob(&single)
		return
	}
	ix := s.jobFor(r.Job)
	js := &s.jobs[ix/jobChunk][ix%jobChunk]
	s.addJobRow(js, gi, r)
	if r.JobEnd != "" {
		s.finishJob(js)
		*js = jobState{}
		s.free = append(s.free, ix)
		if s.curInMap {
			delete(s.jobIdx, r.Job)
		}
		s.hasCur = false
	}
}

// jobFor finds the open job's slot, or opens one.
func (s *Summarizer) jobFor(id string) int32 {
	if s.hasCur && id == s.curJob {
		return s.curIx
	}
	if s.hasCur && !s.curInMap {
		s.jobIdx[s.curJob] = s.curIx // jobs interleave: the current one joins the map
	}
	ix, ok := s.jobIdx[id]
	if !ok {
		if n := len(s.free); n > 0 {
			ix, s.free = s.free[n-1], s.free[:n-1]
		} else {
			if len(s.jobs) == 0 || len(s.jobs[len(s.jobs)-1]) == jobChunk {
				s.jobs = append(s.jobs, make([]jobState, 0, jobChunk))
			}
			c := &s.jobs[len(s.jobs)-1]
			*c = append(*c, jobState{})
			ix = int32((len(s.jobs)-1)*jobChunk + len(*c) - 1)
		}
		s.jobs[ix/jobChunk][ix%jobChunk] = jobState{firstGroup: -1, open: true}
	}
	s.curJob, s.curIx, s.hasCur, s.curInMap = id, ix, true, ok
	return ix
}

func (s *Summarizer) addRow(g *groupAcc, r *ledgerfile.Row) {
	g.g.Rows++
	if r.Holdout {
		g.g.HeldOut++
	}
	if !r.WasSent() {
		g.g.Refused++
		reason := r.Reason()
		if reason == "" {
			reason = "unsent"
		}
		g.refusals[reason]++
		return
	}
	g.g.Attempts++
	if !g.merged {
		g.wait.add(r.Wait.Seconds())
		g.elapsed.add(r.Elapsed.Seconds())
		g.tokens.add(float64(r.Tokens))
		if r.HasTTFB {
			g.ttfb.add(r.TTFB.Seconds())
		}
	}
	oi := outcomeIndex(r.Outcome)
	g.outcomes[oi]++
	g.tokensAll += r.Tokens
	if r.HasCost {
		g.usdAll += r.CostUSD
		g.costRows++
	}
	if oi != 0 {
		g.g.FailedAttempts++
		if s.billing(r).Billed() {
			g.g.BilledFailures++
		}
	}
}

// billing is the row's billing class, or admit.BillingOf's when it has none.
func (s *Summarizer) billing(r *ledgerfile.Row) admit.Billing {
	if r.Billing != "" {
		return r.Billing
	}
	return admit.BillingOf(r.Outcome, r.Elapsed, s.opts.SlowAfter)
}

func (s *Summarizer) addJobRow(js *jobState, gi int32, r *ledgerfile.Row) {
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
		js.end, js.endAttempt = endCode(r.JobEnd), attempt
	}
	sent := r.WasSent()
	oi := uint8(outcomeIndex(r.Outcome))
	waste := sent && oi != 0

	// Seed 000: a non-ok attempt before the job's last attempt is wasted.
	// The last attempt is only known once a later one appears, so the
	// current last row waits as a candidate.
	switch {
	case attempt > js.maxAttempt:
		if js.cand {
			s.countWasted(s.seats[js.candSeat], js.candOutcome, js.candGroup, js.candTokens, js.candUSD)
		}
		js.maxAttempt, js.lastGroup, js.lastOutcome, js.lastSent = attempt, gi, oi, sent
		js.lastAmbig = sent && oi != 0 && s.billing(r) == admit.Ambiguous
		js.cand = waste
		if waste {
			js.candSeat, js.candOutcome, js.candGroup, js.candTokens = s.seatIndex(r.Seat), oi, gi, r.Tokens
			js.candUSD = r.CostUSD
		}
	case waste:
		s.countWasted(r.Seat, oi, gi, r.Tokens, r.CostUSD)
	}

	if !sent {
		return
	}
	js.sent++
	if oi == 0 && (!js.kept || attempt > js.keptAttempt) {
		js.kept, js.keptAttempt, js.keptGroup = true, attempt, gi
		js.keptTokens, js.keptUSD = r.Tokens, r.CostUSD
		js.keptSent = js.sent
		js.keptTime = js.time + r.Wait.Seconds() + r.Elapsed.Seconds()
	}
	js.time += r.Delay.Seconds() + r.Elapsed.Seconds()
	js.tokens += r.Tokens
	js.usd += r.CostUSD
	if !r.HasCost {
		js.allCost = false
	}
	if oi == 0 {
		s.okElapsed.add(r.Elapsed.Seconds())
		s.okWait.add(r.Wait.Seconds())
		if r.HasSplit && r.Elapsed > r.Wait {
			s.rateTokens += r.CompletionTokens
			s.rateSeconds += (r.Elapsed - r.Wait).Seconds()
			s.rateRows++
		}
	}
}

func (s *Summarizer) seatIndex(seat string) int32 {
	if i, ok := s.seatIx[seat]; ok {
		return i
	}
	i := int32(len(s.seats))
	s.seats = append(s.seats, seat)
	s.seatIx[seat] = i
	return i
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
	if js.end != 0 {
		return endCodes[js.end]
	}
	switch {
	case js.kept:
		return ledgerfile.JobSucceeded
	case js.lastSent && js.lastOutcome == 8:
		return ledgerfile.JobCancelled
	case js.lastSent && (js.lastOutcome == 5 || js.lastOutcome == 6 || js.lastAmbig):
		return ledgerfile.JobUnknown
	}
	return ledgerfile.JobFailed
}

func (s *Summarizer) finishJob(js *jobState) {
	touch := func(g *groupAcc) {
		g.jobsTouched++
		if js.fallback {
			g.fallbackJobs++
		}
	}
	touch(s.groups[js.firstGroup])
	for _, gi := range js.groups {
		touch(s.groups[gi])
	}
	touch(s.all)

	end := js.jobEnd()
	decider := js.lastGroup
	if end == ledgerfile.JobSucceeded && js.kept {
		decider = js.keptGroup
	}
	for _, g := range []*groupAcc{s.groups[decider], s.all} {
		switch end {
		case ledgerfile.JobSucceeded:
			g.succeeded++
		case ledgerfile.JobUnknown:
			g.unkn++
		case ledgerfile.JobCancelled:
			g.cancel++
		default:
			g.failed++
		}
	}
	if js.kept {
		for _, g := range []*groupAcc{s.groups[js.keptGroup], s.all} {
			g.keptTokens += js.keptTokens
			g.keptUSD += js.keptUSD
		}
		s.jobTTS.add(js.keptTime)
	}
	if end == ledgerfile.JobSucceeded {
		n := js.sent
		if js.kept {
			n = js.keptSent
		}
		s.jobAPS.add(float64(n))
	}
	s.jobsFig.Jobs++
	if js.sent == 0 {
		return // refused before anything went out: no time or tokens to speak of
	}
	s.jobTime.add(js.time)
	s.jobTokens.add(float64(js.tokens))
	if js.allCost {
		s.jobUSD.add(js.usd)
	}
}

// Summary finishes the jobs still open and computes every figure. Call it
// once, after the last Add.
func (s *Summarizer) Summary() *Summary {
	if s.done {
		panic("summary: Summary called twice")
	}
	s.done = true
	// Jobs with no job_end row (hand-written logs, a crashed run) end here.
	for c := range s.jobs {
		for i := range s.jobs[c] {
			if s.jobs[c][i].open {
				s.finishJob(&s.jobs[c][i])
			}
		}
		s.jobs[c] = nil // let the chunk go as soon as it is counted
	}
	s.jobs, s.jobIdx, s.free = nil, nil, nil
	sc := &s.scratch
	s.jobsFig.Time, s.jobsFig.TimeToSuccess = s.jobTime.sorted(sc), s.jobTTS.sorted(sc)
	s.jobsFig.Tokens, s.jobsFig.USD, s.jobsFig.AttemptsPerSuccess = s.jobTokens.sorted(sc), s.jobUSD.sorted(sc), s.jobAPS.sorted(sc)
	out := &Summary{By: s.opts.By, Rows: s.rows, Before: s.before, Jobs: s.jobsFig}
	var wait, ttfb, elapsed, tokens [][]float64
	for _, g := range s.groups {
		out.Groups = append(out.Groups, g.finish(&s.scratch))
		wait, ttfb = append(wait, g.flatWait), append(ttfb, g.flatTTFB)
		elapsed, tokens = append(elapsed, g.flatElapsed), append(tokens, g.flatTokens)
	}
	slices.SortFunc(out.Groups, func(a, b *Group) int { return strings.Compare(a.Key, b.Key) })
	s.all.flatWait, s.all.flatTTFB = mergeSorted(wait, &s.scratch), mergeSorted(ttfb, &s.scratch)
	s.all.flatElapsed, s.all.flatTokens = mergeSorted(elapsed, &s.scratch), mergeSorted(tokens, &s.scratch)
	out.All = s.all.finish(&s.scratch) // merged: already sorted
	for _, k := range s.wasteKeys {
		out.Wasted = append(out.Wasted, *s.wasted[k])
	}
	slices.SortStableFunc(out.Wasted, func(a, b Wasted) int {
		if a.Calls != b.Calls {
			return int(b.Calls - a.Calls)
		}
		if c := strings.Compare(a.Seat, b.Seat); c != 0 {
			return c
		}
		return strings.Compare(a.Outcome, b.Outcome)
	})
	okElapsed, okWait := s.okElapsed.sorted(sc), s.okWait.sorted(sc)
	out.OK = OKFigures{Elapsed: okElapsed, Wait: okWait, RateTokens: s.rateTokens, RateSeconds: s.rateSeconds, RateRows: s.rateRows}
	return out
}

// mergeSorted merges ascending lists into one new ascending list.
func mergeSorted(lists [][]float64, sc *radixScratch) []float64 {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	out := make([]float64, 0, n)
	if len(lists) > 8 {
		for _, l := range lists {
			out = append(out, l...)
		}
		sortWith(out, sc)
		return out
	}
	heads := make([]int, len(lists))
	for len(out) < n {
		best := -1
		for i, l := range lists {
			if heads[i] < len(l) && (best < 0 || l[heads[i]] < lists[best][heads[best]]) {
				best = i
			}
		}
		out = append(out, lists[best][heads[best]])
		heads[best]++
	}
	return out
}

func ratio(num, den float64) Figure {
	if den == 0 {
		return Figure(math.NaN())
	}
	return Figure(num / den)
}

func (a *groupAcc) finish(sc *radixScratch) *Group {
	g := a.g
	g.Jobs = a.jobsTouched
	g.Succeeded, g.Failed, g.Unknown, g.Cancelled = a.succeeded, a.failed, a.unkn, a.cancel
	if !a.merged {
		a.flatWait, a.flatTTFB, a.flatElapsed, a.flatTokens = a.wait.sorted(sc), a.ttfb.sorted(sc), a.elapsed.sorted(sc), a.tokens.sorted(sc)
	}
	g.Wait, g.TTFB, g.Elapsed, g.Tokens = newDist(a.flatWait), newDist(a.flatTTFB), newDist(a.flatElapsed), newDist(a.flatTokens)
	g.Outcomes = map[string]int64{}
	for i, n := range a.outcomes {
		if n > 0 {
			g.Outcomes[string(admit.Outcomes[i])] = n
		}
	}
	g.Refusals = a.refusals
	switch {
	case g.Succeeded > 0:
		g.AttemptsPerSuccess = Figure(float64(g.Attempts) / float64(g.Succeeded))
	case g.Attempts > 0:
		g.AttemptsPerSuccess = Figure(math.Inf(1)) // attempts were made and none answered
	default:
		g.AttemptsPerSuccess = Figure(math.NaN())
	}
	g.RetryRatio = ratio(float64(g.Attempts), float64(g.Jobs))
	taxTokens := a.tokensAll - a.keptTokens
	g.RetryTax = Tax{
		Tokens:      taxTokens,
		TokensShare: ratio(float64(taxTokens), float64(a.tokensAll)),
		USD:         Figure(math.NaN()),
		USDShare:    Figure(math.NaN()),
		CostRows:    a.costRows,
	}
	if a.costRows > 0 {
		tax := max(a.usdAll-a.keptUSD, 0)
		g.RetryTax.USD = Figure(tax)
		g.RetryTax.USDShare = ratio(tax, a.usdAll)
	}
	g.BillableFailureRate = ratio(float64(g.BilledFailures), float64(g.FailedAttempts))
	g.UnknownRate = ratio(float64(g.Unknown), float64(g.Jobs))
	g.FallbackJobs = a.fallbackJobs
	g.FallbackRate = ratio(float64(a.fallbackJobs), float64(g.Jobs))
	return &g
}

// sortValues sorts non-negative values ascending. Every value a summary
// keeps is a duration, a count or an amount, never negative or NaN, so
// the IEEE 754 bits order like the numbers and an LSD radix sort (four
// 16-bit passes, trivial passes skipped) does the work of pdqsort in a
// fraction of the time on the million-value slices a big log gives.
func sortValues(v []float64) { sortWith(v, nil) }

// radixScratch is sortWith's working memory, kept between sorts.
type radixScratch struct {
	buf    []float64
	counts *[4][1 << 16]int32
}

func sortWith(v []float64, sc *radixScratch) {
	if len(v) < 1024 || len(v) > math.MaxInt32 {
		slices.Sort(v)
		return
	}
	for _, x := range v {
		if !(x >= 0) || math.Signbit(x) {
			slices.Sort(v) // not the shape radix order needs
			return
		}
	}
	if sc == nil {
		sc = &radixScratch{}
	}
	counts := sc.histogram()
	for _, x := range v {
		b := math.Float64bits(x)
		counts[0][b&0xffff]++
		counts[1][b>>16&0xffff]++
		counts[2][b>>32&0xffff]++
		counts[3][b>>48]++
	}
	src, dst := v, sc.buffer(len(v))
	for pass := 0; pass < 4; pass++ {
		c := &counts[pass]
		shift := uint(16 * pass)
		if int(c[math.Float64bits(src[0])>>shift&0xffff]) == len(v) {
			continue // every value has this digit: the pass would not move anything
		}
		var sum int32
		for i := range c {
			c[i], sum = sum, sum+c[i]
		}
		for _, x := range src {
			d := math.Float64bits(x) >> shift & 0xffff
			dst[c[d]] = x
			c[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &v[0] {
		copy(v, src)
	}
}

// values collects floats in chunks, so appending never copies what is
// already there (Go grows a big slice by 1.25×, copying every value
// several times over a million appends); flat copies them once into an
// exact-size slice.
type values struct {
	chunks [][]float64
	cur    []float64
	n      int
}

func (v *values) add(x float64) {
	if len(v.cur) == cap(v.cur) {
		if v.cur != nil {
			v.chunks = append(v.chunks, v.cur)
		}
		v.cur = make([]float64, 0, min(max(v.n, 8), 1<<15))
	}
	v.cur = append(v.cur, x)
	v.n++
}

func (v *values) flat() []float64 {
	out := make([]float64, 0, v.n)
	for _, c := range v.chunks {
		out = append(out, c...)
	}
	out = append(out, v.cur...)
	v.chunks, v.cur = nil, nil
	return out
}

// sorted returns the values as one ascending slice. Big ones are radix
// sorted straight out of the chunks, so the copy into one slice is the
// sort's first pass rather than a pass of its own.
func (v *values) sorted(sc *radixScratch) []float64 {
	chunks := append(v.chunks, v.cur)
	n := v.n
	if n < 1024 || n > math.MaxInt32 {
		out := v.flat()
		slices.Sort(out)
		return out
	}
	for _, c := range chunks {
		for _, x := range c {
			if !(x >= 0) || math.Signbit(x) {
				out := v.flat()
				slices.Sort(out) // not the shape radix order needs
				return out
			}
		}
	}
	v.chunks, v.cur = nil, nil
	counts := sc.histogram()
	for _, c := range chunks {
		for _, x := range c {
			b := math.Float64bits(x)
			counts[0][b&0xffff]++
			counts[1][b>>16&0xffff]++
			counts[2][b>>32&0xffff]++
			counts[3][b>>48]++
		}
	}
	first := math.Float64bits(chunks[0][0])
	var passes []uint
	for pass := uint(0); pass < 4; pass++ {
		if int(counts[pass][first>>(16*pass)&0xffff]) != n {
			passes = append(passes, pass) // a pass where every value shares the digit moves nothing
		}
	}
	out := make([]float64, n)
	buf := sc.buffer(n)
	// Alternate so that the last pass writes into out.
	dst, other := out, buf
	if len(passes)%2 == 0 {
		dst, other = buf, out
	}
	if len(passes) == 0 {
		dst = out
	}
	scatter := func(pass uint, from [][]float64, to []float64) {
		c := &counts[pass]
		var sum int32
		for i := range c {
			c[i], sum = sum, sum+c[i]
		}
		shift := 16 * pass
		for _, ch := range from {
			for _, x := range ch {
				d := math.Float64bits(x) >> shift & 0xffff
				to[c[d]] = x
				c[d]++
			}
		}
	}
	if len(passes) == 0 {
		k := 0
		for _, c := range chunks {
			k += copy(out[k:], c)
		}
		return out
	}
	scatter(passes[0], chunks, dst)
	for _, pass := range passes[1:] {
		dst, other = other, dst
		scatter(pass, [][]float64{other}, dst)
	}
	return out
}

func (sc *radixScratch) histogram() *[4][1 << 16]int32 {
	if sc.counts == nil {
		sc.counts = new([4][1 << 16]int32)
	} else {
		*sc.counts = [4][1 << 16]int32{}
	}
	return sc.counts
}

func (sc *radixScratch) buffer(n int) []float64 {
	if cap(sc.buf) < n {
		sc.buf = make([]float64, n)
	}
	return sc.buf[:n]
}
