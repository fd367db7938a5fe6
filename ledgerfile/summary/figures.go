// The figure types a summary holds: what every view reads.

package summary

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
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
	// Draw counts what report's pictures draw beside the figures
	// (Summary.Drawing, and each group's Gen).
	Draw bool
	// Live says the rows come from their writer as it writes them
	// (simulate, rehearse's own tables), where a row carrying job_end is
	// its job's last: the job is counted there and its slot reused, so
	// memory follows the jobs in flight rather than every job of the
	// run. A log read back is not live: a row after a job's job_end is
	// still that job's, and its jobs are counted when the log ends.
	Live bool
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
	// Gen is elapsed − wait of the group's sent attempts (Gen), counted
	// with Options.Draw.
	Gen Dist `json:"-"`

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
	// Saturated says a token sum of the group reached admit.MaxTokens:
	// tokens_total and the retry tax's tokens are then lower bounds, its
	// share is unknown (null), and a threshold on it fails.
	Saturated bool `json:"saturated,omitempty"`
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

	cachedOf, reasoningOf int64 // the shares' denominators, for exact thresholds
	saturated             bool  // a token sum of these reached admit.MaxTokens
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
	// Drawing is what the pictures draw beside the figures (Options.Draw).
	Drawing *Drawing `json:"-"`
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

// ContentFigures split sent attempts' waits by whether a first content
// byte came (ProducedContent).
type ContentFigures struct {
	Wait  Sorted              // attempts that produced content
	Aside [numOutcomes]Sorted // the others, by outcome index (admit.Outcomes)
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

// SecondsText writes a figure in seconds for a person: 3 decimals, as
// the writer writes durations, and more where the figure has them, to
// the reader's microsecond (a hand-written 0.0004 s wait shows as
// 0.0004, not 0.000); a figure finer still (a mean) shows 6 decimals.
// Every view that prints seconds prints them so, and JSON writes the
// figure whole.
func SecondsText(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	dot := strings.IndexByte(s, '.')
	switch n := len(s) - dot - 1; {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return s
	case dot < 0 || n <= 3:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case n <= 6:
		return s
	}
	return strconv.FormatFloat(v, 'f', 6, 64)
}
