package summary

import (
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

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
