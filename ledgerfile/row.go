// Package ledgerfile is rehearsal.log, format v1: one attempt per logfmt
// line, appended under a lock by many writers, read strictly with line
// numbers, and summarised for reports.
package ledgerfile

import (
	"fmt"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// Header is the first line of a log retrygate created.
const Header = "# retrygate rehearsal log v1"

// TornMarker is the comment a writer appends after repairing a torn last
// line (a crashed writer's partial row): the reader drops the line before
// it instead of reading a truncated row as a real one.
const TornMarker = "# retrygate: the line above was torn (no newline); readers skip it"

// Row is one attempt. Durations are kept as time.Duration and written as
// seconds with 3 decimals. Zero values mean "absent" except where a Has
// field says otherwise.
type Row struct {
	Line int // 1-based line number in the file it was read from; 0 when built

	TS      time.Time // when the attempt was submitted (UTC)
	Job     string
	Attempt int
	Seat    string
	Model   string

	Wait    time.Duration
	Elapsed time.Duration
	TTFB    time.Duration
	HasTTFB bool
	// Connect is a new connection's set-up inside the attempt (DNS, TCP,
	// TLS); absent when a kept-alive connection was reused.
	Connect    time.Duration
	HasConnect bool
	// ITLMean and ITLMax are the mean and max gap between the attempt's
	// chunks carrying text (docs/load.md); absent under two such chunks.
	ITLMean, ITLMax time.Duration
	HasITL          bool

	Tokens           int64
	PromptTokens     int64
	CompletionTokens int64
	HasSplit         bool // prompt_tokens/completion_tokens present
	// TokensFrom is where the counts came from: usage, tokenizer, script,
	// hand, or mixed when the two parts came from different places; then
	// PromptFrom and CompletionFrom say which (written only when they differ).
	TokensFrom     string
	PromptFrom     string
	CompletionFrom string
	// CachedTokens and CacheWriteTokens are the prompt's input read from
	// and written to the provider's prompt cache, ReasoningTokens the
	// completion's reasoning: parts of PromptTokens and CompletionTokens,
	// kept (cached_tokens, cache_write_tokens, reasoning_tokens) only
	// where the provider reported them (the Has fields).
	CachedTokens, CacheWriteTokens, ReasoningTokens int64
	HasCached, HasCacheWrite, HasReasoning          bool

	Outcome    admit.Outcome
	HTTPStatus int
	Billing    admit.Billing
	CostUSD    float64
	HasCost    bool
	// ReserveUSD is what the gate reserved for a job's first attempt on a
	// priced seat (price × (prompt counted locally + max_tokens)): the
	// spend estimate before anything is observed.
	ReserveUSD float64
	// UncachedUSD is what the attempt would have cost with every input
	// token at price_in, on a priced row with cache parts
	// (uncached_usd): the cache saved UncachedUSD − CostUSD.
	UncachedUSD float64

	RetryAfter    time.Duration
	HasRetryAfter bool
	// RateLimit is the provider's rate-limit state on the answer
	// (ratelimit_remaining_requests, ratelimit_remaining_tokens,
	// ratelimit_reset_s), each part where it was reported.
	RateLimit admit.RateLimit
	ErrorCode string
	Delay     time.Duration // backoff slept before this attempt

	// Window is the retry budget's input on a retry it judged: the first
	// attempts and retries of every job sent in retry.budget.window before
	// it (window_firsts, window_retries).
	Window    admit.BudgetWindow
	HasWindow bool

	SpentS      time.Duration
	SpentTokens int64
	SpentUSD    float64
	Used        int
	HasSpent    bool
	// InFlight is how many of the job's attempts sent before this one
	// were still in flight when this one was decided (inflight): their
	// rows come before this one, but its decision did not see them. They
	// are counted in Used, each with the estimate as spent.
	InFlight int

	Decision string // "admit" or "refuse: <reason>"
	Unsent   bool   // the gate refused before sending (sent=false); numbers are the estimate
	// Would is a shadow proxy's row's word (would): what the policy would
	// have decided where the row's own decision is the pass-through:
	// admit, refuse: <reason>, WouldRetry or WouldFallback.
	Would     string
	Holdout   bool
	Fallback  bool   // sent to a seat other than the job's first
	JobEnd    string // succeeded | failed | unknown, on a job's last row
	PromptSHA string
	Tags      string // the prompt set line's tags, comma-joined (tags)
	Note      string

	Extra []KV // keys this version does not know, in order (forward compatible)
}

// KV is one unknown key and its value, kept verbatim.
type KV struct{ Key, Value string }

// Token sources (tokens_from, prompt_tokens_from, completion_tokens_from).
const (
	FromUsage     = "usage"
	FromTokenizer = "tokenizer"
	FromScript    = "script"
	FromHand      = "hand"
	FromEstimate  = "estimate"
	// FromMixed is tokens_from on a row whose prompt and completion counts
	// came from different sources, named by prompt_tokens_from and
	// completion_tokens_from.
	FromMixed = "mixed"
)

// Job end states.
const (
	JobSucceeded = "succeeded"
	JobFailed    = "failed"
	JobUnknown   = "unknown"
	JobCancelled = "cancelled"
)

// The words of would= beside a decision: the policy would have retried
// the failed attempt on its seat, or sent it (or its retry) to another.
const (
	WouldRetry    = "retry"
	WouldFallback = "fallback"
)

// ParseWould checks a would= value: a decision, retry or fallback.
func ParseWould(v string) error {
	if v == WouldRetry || v == WouldFallback {
		return nil
	}
	if _, err := admit.ParseDecision(v); err != nil {
		return fmt.Errorf("not what a policy would do %q (want admit, refuse: <reason>, retry or fallback)", truncate(v))
	}
	return nil
}

// Admitted reports whether the row's decision was admit.
func (r *Row) Admitted() bool { return r.Decision == "" || r.Decision == "admit" }

// Reason is the refusal reason, or "" when admitted.
func (r *Row) Reason() string {
	if r.Admitted() {
		return ""
	}
	if len(r.Decision) > len("refuse: ") {
		return r.Decision[len("refuse: "):]
	}
	return r.Decision
}

// WasSent reports whether the attempt was actually sent. A row marked
// sent=false was refused before sending; so was a hand-written refused row
// with no outcome (seed 003's `decision=refuse: queue wait` line), whose
// numbers are the seat's observation but whose attempt never went out.
func (r *Row) WasSent() bool {
	if r.Unsent {
		return false
	}
	return r.Admitted() || r.Outcome != ""
}

// maxWindowCount bounds window_firsts and window_retries: more sends in
// one window than any budget needs to count.
const maxWindowCount = 1 << 40
