package summary

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
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
	// Deadline is the policy's deadline, for the deadline-miss rule's
	// cut-off timeouts (MissesDeadline); 0 counts only refusals.
	Deadline time.Duration
	// Groups are listed first, in this order, even when no row lands in
	// them (a fallback chain's seats). With KeepOrder the groups after
	// them follow in the order they first appear; otherwise every group
	// sorts by key.
	Groups    []string
	KeepOrder bool
	// NoStream leaves the streaming figures (Stream: TPOT, output TPS,
	// ITL, and each group's ITL) uncounted and empty: simulate reads none
	// of them, and their exact values are its costliest to count.
	NoStream bool
	// OnlyEndToEnd leaves every distribution but the jobs' end-to-end
	// times uncounted and empty: each group's wait, TTFB, elapsed and
	// tokens, OK, Content, and the jobs' Time, TimeToSuccess, Tokens, USD
	// and AttemptsPerSuccess. Counts, sums, means and rates are kept.
	// simulate reads no other distribution (but for --html).
	OnlyEndToEnd bool
	// OnlyGroups leaves every distribution but each group's (wait, TTFB,
	// elapsed, tokens, ITL) and Stream uncounted and empty: OK, Content,
	// and the jobs' Time, TimeToSuccess, Tokens, USD, AttemptsPerSuccess
	// and EndToEnd. Counts, sums, means and rates are kept. check's
	// thresholds and pages read no other distribution (Summary.Observed).
	OnlyGroups bool
	// Goodput counts Summary.Goodput, judging each job's kept answer
	// against the per-attempt ones of Thresholds (check).
	Goodput    bool
	Thresholds []Threshold
	// Steps > 0 counts Summary.Steps: the run cut into stretches of this
	// length from StepsFrom (simulate --ramp: one per rate).
	Steps     time.Duration
	StepsFrom time.Time
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
	N   int64  `json:"n"`
	P50 Figure `json:"p50"`
	P75 Figure `json:"p75"`
	P95 Figure `json:"p95"`
	P99 Figure `json:"p99"`
	Max Figure `json:"max"`
	// Values are every value: thresholds and histograms need them whole.
	Values Sorted `json:"-"`
}

// newDist reads the percentiles of values.
func newDist(values Sorted) Dist {
	d := Dist{N: values.Len(), Values: values}
	p := func(q float64) Figure { return Figure(values.Percentile(q)) }
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
	// ITL is the group's sent attempts' mean ITL (docs/load.md); absent
	// when none has one (logs written before itl_mean_s).
	ITL *Dist `json:"itl_s,omitempty"`

	Outcomes map[string]int64 `json:"outcomes"`
	Refusals map[string]int64 `json:"refusals"`

	TokensTotal int64  `json:"tokens_total"` // over sent attempts
	USDTotal    Figure `json:"usd_total"`    // over sent attempts with cost_usd
	Billed      int64  `json:"billed_attempts"`

	SuccessRate        Figure `json:"success_rate"` // of jobs
	FailedRate         Figure `json:"failed_rate"`
	AttemptFailureRate Figure `json:"attempt_failure_rate"` // of sent attempts: not ok
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

	Cache CacheFigures `json:"cache"`
}

// CacheFigures are the prompt cache's and reasoning's figures over a
// group's sent attempts, each over the rows whose provider reported the
// part it needs (docs/log.md); a figure with no such row is null.
type CacheFigures struct {
	// Retries are sent attempts after a job's first (attempt > 1) whose
	// row reports cache_write_tokens; Rewritten are those that wrote the
	// prompt to the cache again (cache_write_tokens > 0), and
	// WriteRateOnRetries is Rewritten ÷ Retries.
	Retries            int64  `json:"retries_reporting_writes"`
	Rewritten          int64  `json:"retries_rewritten"`
	WriteRateOnRetries Figure `json:"cache_write_rate_on_retries"`
	// CachedTokens ÷ the prompt tokens of the rows reporting them.
	CachedTokens int64  `json:"cached_tokens"`
	CachedShare  Figure `json:"cached_share"`
	// CacheWriteTokens is Σ cache_write_tokens.
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// ReasoningTokens ÷ the completion tokens of the rows reporting them.
	ReasoningTokens int64  `json:"reasoning_tokens"`
	ReasoningShare  Figure `json:"reasoning_share"`
	// SavedUSD is Σ (uncached_usd − cost_usd) over the rows with
	// uncached_usd: what cache pricing saved against all input at
	// price_in (negative when writes cost more than reads saved).
	SavedUSD Figure `json:"saved_usd"`
	// RetryTaxUncachedUSD is the retry tax in USD with every input token
	// at price_in (uncached_usd where a row has it, else cost_usd): the
	// figure a cache-blind estimate would give, beside RetryTax.USD.
	RetryTaxUncachedUSD Figure `json:"retry_tax_usd_uncached"`
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

// JobFigures are per-job figures over every job, for tune, check and
// simulate.
type JobFigures struct {
	Jobs int64 `json:"jobs"`
	// Time is each job's spent time (ledgerfile.AddSpent) once it ended; Time, Tokens
	// and USD leave out jobs that sent nothing.
	Time Sorted `json:"-"`
	// TimeToSuccess is, for each job with a kept answer, the spent time
	// before the kept attempt plus that attempt's elapsed (which holds
	// its wait): what the gate's deadline check charges a job that
	// succeeds.
	TimeToSuccess Sorted `json:"-"`
	// Tokens is each job's Σ tokens over its sent attempts.
	Tokens Sorted `json:"-"`
	// USD is each job's Σ cost_usd, for jobs whose every sent attempt has one.
	USD Sorted `json:"-"`
	// AttemptsPerSuccess is, for each succeeded job, its sent attempts.
	AttemptsPerSuccess Sorted `json:"-"`
	// EndToEnd is each job's first row's ts to its last row's end (ts +
	// elapsed for a sent row), for jobs whose rows carry a ts.
	EndToEnd Sorted `json:"-"`

	// Means per job over every job, and per succeeded job.
	AttemptsPerJob   Figure `json:"attempts_per_job"`
	BilledPerJob     Figure `json:"billed_attempts_per_job"`
	TokensPerJob     Figure `json:"tokens_per_job"`
	USDPerJob        Figure `json:"usd_per_job"` // null when no sent row carries cost_usd
	WastedPerJob     Figure `json:"wasted_calls_per_job"`
	TokensPerSuccess Figure `json:"tokens_per_success"`
	USDPerSuccess    Figure `json:"usd_per_success"`

	// Standard errors of the per-job means (attempts, billed attempts,
	// USD), over every job: how far a simulated figure may be from the
	// policy's own.
	AttemptsSE Figure `json:"attempts_per_job_se"`
	BilledSE   Figure `json:"billed_attempts_per_job_se"`
	USDSE      Figure `json:"usd_per_job_se"`

	// Deadline misses (MissesDeadline), over every job.
	DeadlineMisses   int64  `json:"deadline_misses"`
	DeadlineMissRate Figure `json:"deadline_miss_rate"`
}

// Summary is everything report prints.
type Summary struct {
	By     GroupBy `json:"by"`
	Rows   int64   `json:"rows"`
	Before int64   `json:"rows_before_since"` // rows dropped by Since
	// RefusedRows are the rows the policy refuses to send (Refused): the
	// rows not sent, or, for rows counted with AddAs, the replayed
	// policy's. Under the logged decisions it is All.Refused.
	RefusedRows int64  `json:"refused_rows"`
	RefusedRate Figure `json:"refused_rate"` // of rows
	// BudgetRefused are the refused rows whose reason is the retry budget
	// (retry.budget), counted as RefusedRows are.
	BudgetRefused int64 `json:"retry_budget_refusals,omitempty"`
	// Steps are the run's stretches of Options.Steps, when asked for.
	Steps  []Step   `json:"steps,omitempty"`
	Groups []*Group `json:"groups"`
	All    *Group   `json:"all"`
	Wasted []Wasted `json:"wasted_calls"`
	Jobs   JobFigures
	// OK holds the ok attempts' figures recommendations rest on.
	OK OKFigures `json:"-"`
	// Content holds the waits tune's wait cap rests on.
	Content ContentFigures `json:"-"`
	// Stream holds the per-attempt streaming figures (docs/load.md).
	Stream StreamFigures `json:"stream"`
	// Goodput is counted with Options.Goodput (check: it knows the
	// policy's thresholds).
	Goodput *Goodput `json:"goodput,omitempty"`
	// Breaker is when each seat's breaker was open (events.go).
	Breaker []BreakerSpan `json:"-"`
}

// StreamFigures are docs/load.md's per-attempt streaming figures over the
// ok attempts, read from the keys every row already has.
type StreamFigures struct {
	// TPOT: (elapsed − wait) ÷ (completion_tokens − 1), over ok attempts
	// with a token split and at least 2 completion tokens.
	TPOT Dist `json:"tpot_s"`
	// OutputTPS: completion_tokens ÷ elapsed, over ok attempts with a
	// token split and elapsed > 0.
	OutputTPS Dist `json:"output_tps"`
	// ITL: each sent attempt's mean gap between chunks carrying text,
	// over the attempts whose rows have itl_mean_s.
	ITL Dist `json:"itl_s"`
}

// ITL is a row's mean inter-token latency in seconds; false when the row
// has none (fewer than two chunks carrying text, or not sent).
func ITL(r *ledgerfile.Row) (float64, bool) {
	d, ok := itlDur(r)
	return Seconds(d), ok
}

// itlDur is ITL's rule as the row's duration, which the summary counts at
// the log's millisecond.
func itlDur(r *ledgerfile.Row) (time.Duration, bool) {
	if r.Unsent || !r.HasITL {
		return 0, false
	}
	return r.ITLMean, true
}

// TPOT is a row's time per output token in seconds; false when the row
// has none (see StreamFigures).
func TPOT(r *ledgerfile.Row) (float64, bool) {
	if r.Unsent || r.Outcome != admit.OK || !r.HasSplit || r.CompletionTokens < 2 || r.Elapsed < r.Wait {
		return 0, false
	}
	return Seconds(r.Elapsed-r.Wait) / float64(r.CompletionTokens-1), true
}

// OutputTPS is a row's output tokens per second; false when it has none.
func OutputTPS(r *ledgerfile.Row) (float64, bool) {
	if r.Unsent || r.Outcome != admit.OK || !r.HasSplit || r.Elapsed <= 0 {
		return 0, false
	}
	return float64(r.CompletionTokens) / Seconds(r.Elapsed), true
}

// ContentFigures split sent attempts' waits by whether a first content
// byte came (ProducedContent).
type ContentFigures struct {
	Wait  Sorted              // attempts that produced content
	Aside [numOutcomes]Sorted // the others, by outcome index (admit.Outcomes)
}

// ProducedContent reports whether a sent attempt's wait is a real first
// content byte: an answer (ok, or incomplete: ended short by its cap or
// a filter), or a reset after content had started (its wait came before
// the break, or it carries completion tokens). An error's "wait" is how
// long the error took to come back.
func ProducedContent(r *ledgerfile.Row) bool {
	switch outcomeIndex(r.Outcome) {
	case okIndex, incompleteIndex:
		return true
	case resetIndex:
		return r.Wait > 0 && (r.Wait < r.Elapsed || r.CompletionTokens > 0)
	}
	return false
}

// OKFigures are the sent attempts that returned an answer.
type OKFigures struct {
	Elapsed Sorted
	Wait    Sorted
	// Rate: Σ completion_tokens ÷ Σ(elapsed − wait) over ok rows with a
	// token split and elapsed > wait (seed 001's generation rate).
	RateTokens  int64
	RateSeconds float64
	RateRows    int64
}

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
	wastePaid map[wasteKey]bool // a row of it had a cost: else its USD is unknown, not 0

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

// uncachedUSD is a priced row's cost with every input token at price_in.
func uncachedUSD(r *ledgerfile.Row) float64 {
	if r.UncachedUSD > 0 {
		return r.UncachedUSD
	}
	return r.CostUSD
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

func (c *cacheAcc) figures(costRows int64) CacheFigures {
	f := CacheFigures{
		Retries: c.retries, Rewritten: c.rewritten, WriteRateOnRetries: ratio(float64(c.rewritten), float64(c.retries)),
		CachedTokens: c.cached, CachedShare: ratio(float64(c.cached), float64(c.cachedOf)),
		CacheWriteTokens: c.written,
		ReasoningTokens:  c.reasoning, ReasoningShare: ratio(float64(c.reasoning), float64(c.reasoningOf)),
		SavedUSD: Figure(math.NaN()), RetryTaxUncachedUSD: Figure(math.NaN()),
	}
	if c.savedRows > 0 {
		f.SavedUSD = Figure(c.saved)
	}
	if costRows > 0 {
		f.RetryTaxUncachedUSD = Figure(max(c.uncachedAll-c.keptUncached, 0))
	}
	return f
}

// numOutcomes is len(admit.Outcomes).
const numOutcomes = 10

const (
	okIndex         = 0
	resetIndex      = 7
	cancelledIndex  = 8
	incompleteIndex = 9
)

// outcomeIndex is a sent row's outcome as an index into admit.Outcomes.
// A sent row with no outcome is the seed's hand-written form of an
// answered attempt: ok. An outcome the log does not define counts with
// cancelled.
func outcomeIndex(o admit.Outcome) int {
	if o == "" {
		return okIndex
	}
	if i := slices.Index(admit.Outcomes, o); i >= 0 {
		return i
	}
	return cancelledIndex
}

type wasteKey struct {
	seat    string
	outcome uint8
}

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
	// second is the second group touched (a fallback seat), -1 before
	// one: most jobs touch one or two, and a job allocates nothing for
	// them; groups holds any after those two.
	second int32
	groups []int32

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

// New starts an empty summary.
func New(opts Options) *Summarizer {
	if opts.By == "" {
		opts.By = BySeat
	}
	s := &Summarizer{
		opts:      opts,
		ids:       map[uint64]int32{},
		seed:      maphash.MakeSeed(),
		wasted:    map[wasteKey]*Wasted{},
		wastePaid: map[wasteKey]bool{},
		all:       &groupAcc{g: Group{Key: AllGroup}, refusals: map[string]int64{}, merged: true},
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

// LoggedDecision is the decision a row records: its decision key; without
// one, "admit" for a sent row and "refuse" for one refused before sending.
// A sent row cut by the wait cap records "refuse: queue wait": the policy
// refused it, live.
func LoggedDecision(r *ledgerfile.Row) string {
	switch {
	case r.Decision != "" && (r.Decision != admitted || r.WasSent()):
		return r.Decision
	case r.WasSent():
		return admitted
	}
	return "refuse"
}

const admitted = "admit"

// Refused is the one refusal rule: whether the policy whose decision for
// r is decision refuses to send it. Under the decision the row records,
// that is a row not sent (ledgerfile.Row.WasSent); a sent row saying
// refuse (a live wait-cap cut, a record past the cap) was sent all the
// same. Under another policy's decision (check's replay), a row it flips
// (Replayed.Changed) is refused when that decision refuses; a row it does
// not flip keeps what the log says.
func Refused(r *ledgerfile.Row, decision string) bool {
	if (LoggedDecision(r) == admitted) != (decision == admitted) {
		return decision != admitted
	}
	return !r.WasSent()
}

// budgetRefusal is the printed decision of a retry the retry budget refused.
var budgetRefusal = admit.Refuse(admit.ReasonRetryBudget).String()

// RefusalReason is the reason an unsent row counts under in
// Group.Refusals: its decision's, or "unsent" when it names none.
func RefusalReason(r *ledgerfile.Row) string {
	if reason := r.Reason(); reason != "" {
		return reason
	}
	return "unsent"
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
		single := jobState{firstGroup: -1, second: -1}
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
		s.jobs[ix/jobChunk][ix%jobChunk] = jobState{firstGroup: -1, second: -1, open: true, hash: h}
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

// Seconds is a duration as the log writes it, in seconds: the double
// nearest its three decimals (rounded to the millisecond first, as the
// log rounds it), so that 0.700 reads as 0.7, the same double a
// threshold's 0.7s, 0.7 or 700ms is.
func Seconds(d time.Duration) float64 {
	return float64(logged(d)/time.Millisecond) / msUnit
}

// logged is a duration as the log keeps it: d.Round(time.Millisecond).
// A duration read from a log is never negative nor near overflow, and
// for those Round is the sum below (half a millisecond rounds up), which
// the compiler inlines with a constant divisor; any other d goes to Round.
func logged(d time.Duration) time.Duration {
	if d < 0 || d > 1<<62 {
		return d.Round(time.Millisecond)
	}
	r := d % time.Millisecond
	if r+r < time.Millisecond {
		return d - r
	}
	return d + time.Millisecond - r
}

// MissesDeadline is the one deadline-miss rule: the policy stops the job
// for its deadline. Either its decision for the row is `refuse:
// deadline` (logged, or replayed by check), or the row is a sent attempt
// that timed out at the end of what was left of the deadline: spent, the
// job's spend through this attempt (ledgerfile.AddSpent; its own delay
// and elapsed included), reaches the deadline. AddSpent rounds each
// duration to the log's milliseconds, so the reach is judged within that
// rounding: half a millisecond per duration summed (terms). Note text is
// never read.
func MissesDeadline(decision string, r *ledgerfile.Row, spent time.Duration, terms int, deadline time.Duration) bool {
	if decision == deadlineRefusal {
		return true
	}
	if deadline <= 0 || !r.WasSent() || r.Outcome != admit.Timeout {
		return false
	}
	return spent+time.Duration(terms)*time.Millisecond/2 >= deadline
}

var deadlineRefusal = admit.Refuse(admit.ReasonDeadline).String()

func (s *Summarizer) addJobRow(js *jobState, gi int32, r *ledgerfile.Row, f rowFacts, decision string) {
	js.seen++
	attempt := int32(r.Attempt)
	if attempt == 0 {
		attempt = js.seen
	}
	if js.firstGroup < 0 {
		js.firstGroup = gi
		js.allCost = true
	} else if gi != js.firstGroup && gi != js.second && !slices.Contains(js.groups, gi) {
		if js.second < 0 {
			js.second = gi
		} else {
			js.groups = append(js.groups, gi)
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
	if !math.IsNaN(usd) { // NaN: the row had no cost
		w.USD += Figure(usd)
		s.wastePaid[k] = true
	}
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
	if js.second >= 0 {
		touch(s.groups[js.second])
	}
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

const (
	// msUnit is milliseconds per second: durations are counted in the
	// log's milliseconds, and k of them read as k/1000 s, the double
	// nearest the log's decimal (k × 0.001 is not: 700 × 0.001 is
	// 0.7000000000000001, and a threshold at 0.7s would fail on it).
	msUnit    = 1000
	countUnit = 1
	// Figures the log holds no unit for are counted finer than any output
	// prints them: USD to the micro-dollar (tables print 4 decimals, JSON
	// 6), TPOT to the microsecond, output tokens/s to 0.01. Memory then
	// follows their range, not the rows.
	usdUnit  = 1e6
	tpotUnit = 1e6
	tpsUnit  = 100
)

// Close finishes the jobs still open and computes every figure, once,
// after the last Add: every view (tables, JSON, thresholds, tune, the
// simulator's figures) reads the one result.
func (s *Summarizer) Close() *Summary {
	if s.done {
		panic("summary: Close called twice")
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
	s.jobs, s.ids, s.free, s.ended = nil, nil, nil, nil
	jf := JobFigures{
		Jobs: s.jobs1, Time: s.jobTime.sorted(msUnit), TimeToSuccess: s.jobTTS.sorted(msUnit),
		Tokens: s.jobTokens.sorted(countUnit), USD: s.jobUSD.sorted(usdUnit),
		AttemptsPerSuccess: s.jobAPS.sorted(countUnit), EndToEnd: s.jobE2E.sorted(msUnit),
		DeadlineMisses: s.misses, DeadlineMissRate: ratio(float64(s.misses), float64(s.jobs1)),
	}
	jf.AttemptsSE = stdErr(s.jobs1, s.sumAttempts, s.sqAttempts)
	jf.BilledSE = stdErr(s.jobs1, s.sumBilled, s.sqBilled)
	jf.USDSE = stdErr(s.jobs1, s.sumUSD, s.sqUSD)
	out := &Summary{By: s.opts.By, Rows: s.rows, Before: s.before, Jobs: jf,
		RefusedRows: s.refusedRows, RefusedRate: ratio(float64(s.refusedRows), float64(s.rows)), BudgetRefused: s.budgetRefused}
	if s.steps != nil {
		out.Steps = s.steps.close()
	}
	var wait, ttfb, elapsed, tokens, itl []Sorted
	for _, g := range s.groups {
		out.Groups = append(out.Groups, g.finish())
		wait, ttfb = append(wait, g.sWait), append(ttfb, g.sTTFB)
		itl = append(itl, g.sITL)
		elapsed, tokens = append(elapsed, g.sElapsed), append(tokens, g.sTokens)
	}
	if !s.opts.KeepOrder {
		slices.SortFunc(out.Groups[s.listed:], func(a, b *Group) int { return strings.Compare(a.Key, b.Key) })
	}
	s.all.sWait, s.all.sTTFB = merge(wait...), merge(ttfb...)
	s.all.sElapsed, s.all.sTokens = merge(elapsed...), merge(tokens...)
	s.all.sITL = merge(itl...)
	out.All = s.all.finish()
	all, n := out.All, float64(s.jobs1)
	jf = out.Jobs
	jf.AttemptsPerJob, jf.BilledPerJob = ratio(float64(all.Attempts), n), ratio(float64(all.Billed), n)
	jf.TokensPerJob, jf.WastedPerJob = ratio(float64(all.TokensTotal), n), ratio(float64(all.WastedCalls), n)
	jf.USDPerJob, jf.USDPerSuccess = Figure(math.NaN()), Figure(math.NaN())
	if all.RetryTax.CostRows > 0 {
		jf.USDPerJob, jf.USDPerSuccess = ratio(float64(all.USDTotal), n), ratio(float64(all.USDTotal), float64(all.Succeeded))
	}
	jf.TokensPerSuccess = ratio(float64(all.TokensTotal), float64(all.Succeeded))
	out.Jobs = jf
	for _, k := range s.wasteKeys {
		w := *s.wasted[k]
		if !s.wastePaid[k] {
			w.USD = Figure(math.NaN()) // no row of it had a cost: unknown, not free
		}
		out.Wasted = append(out.Wasted, w)
	}
	slices.SortStableFunc(out.Wasted, func(a, b Wasted) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), strings.Compare(a.Seat, b.Seat), strings.Compare(a.Outcome, b.Outcome))
	})
	out.OK = OKFigures{Elapsed: s.okElapsed.sorted(msUnit), Wait: s.okWait.sorted(msUnit),
		RateTokens: s.rateTokens, RateSeconds: s.rateSeconds, RateRows: s.rateRows}
	out.Content.Wait = s.contentWait.sorted(msUnit)
	out.Stream = StreamFigures{TPOT: newDist(s.tpot.sorted(tpotUnit)), OutputTPS: newDist(s.outTPS.sorted(tpsUnit)), ITL: newDist(s.itl.sorted(msUnit))}
	for i := range s.asideWait {
		out.Content.Aside[i] = s.asideWait[i].sorted(msUnit)
	}
	out.Breaker = s.brk.result(s.opts.Since)
	if s.good != nil {
		gp := s.good.close()
		out.Goodput = &gp
	}
	return out
}

// stdErr is the standard error of a mean over n values from their sum and
// sum of squares; 0 with fewer than two.
func stdErr(n int64, sum, sq float64) Figure {
	if n < 2 {
		return 0
	}
	k := float64(n)
	m := sum / k
	v := (sq - k*m*m) / (k - 1)
	return Figure(math.Sqrt(max(v, 0) / k))
}

func ratio(num, den float64) Figure {
	if den == 0 {
		return Figure(math.NaN())
	}
	return Figure(num / den)
}

func (a *groupAcc) finish() *Group {
	g := a.g
	if !a.merged {
		a.sWait, a.sTTFB, a.sElapsed, a.sTokens = a.wait.sorted(msUnit), a.ttfb.sorted(msUnit), a.elapsed.sorted(msUnit), a.tokens.sorted(countUnit)
		a.sITL = a.itl.sorted(msUnit)
	}
	g.Wait, g.TTFB, g.Elapsed, g.Tokens = newDist(a.sWait), newDist(a.sTTFB), newDist(a.sElapsed), newDist(a.sTokens)
	if a.sITL.Len() > 0 {
		itl := newDist(a.sITL)
		g.ITL = &itl
	}
	g.Outcomes = map[string]int64{}
	for i, n := range a.outcomes {
		if n > 0 {
			g.Outcomes[string(admit.Outcomes[i])] = n
		}
	}
	g.Refusals = a.refusals
	g.TokensTotal = a.tokensAll
	g.USDTotal = Figure(math.NaN())
	if a.costRows > 0 {
		g.USDTotal = Figure(a.usdAll)
	}
	switch {
	case g.Succeeded > 0:
		g.AttemptsPerSuccess = Figure(float64(g.Attempts) / float64(g.Succeeded))
	case g.Attempts > 0:
		g.AttemptsPerSuccess = Figure(math.Inf(1)) // attempts were made and none answered
	default:
		g.AttemptsPerSuccess = Figure(math.NaN())
	}
	g.SuccessRate = ratio(float64(g.Succeeded), float64(g.Jobs))
	g.FailedRate = ratio(float64(g.Failed), float64(g.Jobs))
	g.AttemptFailureRate = ratio(float64(g.FailedAttempts), float64(g.Attempts))
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
	g.FallbackRate = ratio(float64(g.FallbackJobs), float64(g.Jobs))
	g.Cache = a.cache.figures(a.costRows)
	return &g
}
