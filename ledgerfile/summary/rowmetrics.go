// The rules one row is counted under: each a function of the row alone,
// so views and counters outside a summary (the proxy's metrics) ask them too.

package summary

import (
	"math/bits"
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

// itlDur is ITL's rule as the row's duration, which the summary counts as
// every duration, as the reader keeps it.
func itlDur(r *ledgerfile.Row) (time.Duration, bool) {
	if r.Unsent || !r.HasITL {
		return 0, false
	}
	return r.ITLMean, true
}

// Resolutions of the figures the log holds no unit for, as powers of
// ten: TPOT is counted to the microsecond, output tokens/s to 0.01, each
// rounded half up from the row's exact numbers, and is that decimal in
// every view and threshold (docs/reading.md).
const (
	secExp   = 6 // durations: the reader's microseconds (ledgerfile.ReadResolution)
	countExp = 0
	tpotExp  = 6
	tpsExp   = 2
)

// TPOT is a row's time per output token in seconds, (elapsed − wait) ÷
// (completion tokens − 1) to the microsecond; false when the row has
// none (see StreamFigures).
func TPOT(r *ledgerfile.Row) (float64, bool) {
	u, ok := tpotUnits(r)
	return float64(u) / 1e6, ok
}

func tpotUnits(r *ledgerfile.Row) (int64, bool) {
	if r.Unsent || r.Outcome != admit.OK || !r.HasSplit || r.CompletionTokens < 2 || r.Elapsed < r.Wait {
		return 0, false
	}
	return divRound(uint64(micros(r.Elapsed)-micros(r.Wait)), 1, uint64(r.CompletionTokens-1)), true
}

// OutputTPS is a row's output tokens per second, completion tokens ÷
// elapsed to 0.01; false when it has none.
func OutputTPS(r *ledgerfile.Row) (float64, bool) {
	u, ok := tpsUnits(r)
	return float64(u) / 100, ok
}

func tpsUnits(r *ledgerfile.Row) (int64, bool) {
	el := micros(r.Elapsed)
	if r.Unsent || r.Outcome != admit.OK || !r.HasSplit || el <= 0 {
		return 0, false
	}
	// completion × 10^6 µs/s × 10^2 units, over elapsed in µs.
	return divRound(uint64(admit.ClampTokens(r.CompletionTokens)), 1e8, uint64(el)), true
}

// divRound is a × b ÷ c rounded half up, for a × b within 128 bits and
// a quotient within int64 (a ≤ 2^53, b ≤ 10^8: it is).
func divRound(a, b, c uint64) int64 {
	hi, lo := bits.Mul64(a, b)
	q, r := bits.Div64(hi, lo, c)
	if r >= c-r {
		q++
	}
	return int64(q)
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
	okIndex          = 0
	serverErrorIndex = 4
	resetIndex       = 7
	cancelledIndex   = 8
	incompleteIndex  = 9
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

// Seconds is a duration as the reader keeps it, in seconds: the double
// nearest its decimal (to the microsecond, ledgerfile.Kept), so that
// 0.700 reads as 0.7, the same double a threshold's 0.7s, 0.7 or 700ms
// is, and 0.0004 as 0.0004.
func Seconds(d time.Duration) float64 { return float64(micros(d)) / 1e6 }

// secondsDec is Seconds exactly.
func secondsDec(d time.Duration) Dec { return DecOf(uint64(micros(d)), -secExp) }

// The rules a summary counts one row under, for counters kept outside
// a summary (the proxy's Prometheus metrics): they count what Add
// counts, by the same functions.

// RowBilling is a sent row's billing class: its billing key, or
// admit.BillingOf's when it has none (slowAfter as Options.SlowAfter).
func RowBilling(r *ledgerfile.Row, slowAfter time.Duration) admit.Billing {
	if r.Billing != "" {
		return r.Billing
	}
	return admit.BillingOf(RowOutcome(r), r.Elapsed, slowAfter) // a hand-written answer is ok, and billed
}

// RowOutcome is the outcome a sent row counts under in Group.Outcomes:
// its own; none is ok (the hand-written form of an answer); one the log
// does not define counts as cancelled.
func RowOutcome(r *ledgerfile.Row) admit.Outcome {
	return admit.Outcomes[outcomeIndex(r.Outcome)]
}
