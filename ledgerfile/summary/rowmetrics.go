// The rules one row is counted under: each a function of the row alone,
// so views and counters outside a summary (the proxy's metrics) ask them too.

package summary

import (
	"slices"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

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

// uncachedUSD is a priced row's cost with every input token at price_in.
func uncachedUSD(r *ledgerfile.Row) float64 {
	if r.UncachedUSD > 0 {
		return r.UncachedUSD
	}
	return r.CostUSD
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

// The rules a summary counts one row under, for counters kept outside
// a summary (the proxy's Prometheus metrics): they count what Add
// counts, by the same functions.

// RowBilling is a sent row's billing class: its billing key, or
// admit.BillingOf's when it has none (slowAfter as Options.SlowAfter).
func RowBilling(r *ledgerfile.Row, slowAfter time.Duration) admit.Billing {
	if r.Billing != "" {
		return r.Billing
	}
	return admit.BillingOf(r.Outcome, r.Elapsed, slowAfter)
}

// RowOutcome is the outcome a sent row counts under in Group.Outcomes:
// its own; none is ok (the hand-written form of an answer); one the log
// does not define counts as cancelled.
func RowOutcome(r *ledgerfile.Row) admit.Outcome {
	return admit.Outcomes[outcomeIndex(r.Outcome)]
}
