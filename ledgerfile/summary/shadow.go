package summary

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// Shadow is what enforcing the policy would change on a shadow proxy's
// log (`proxy --shadow`: each request forwarded once, its row's would=
// saying what the policy would have done). Check fills it from the rows
// that carry would=; it is nil on a log with none.
type Shadow struct {
	Rows       int64         `json:"rows"`          // requests forwarded once, each a row with would=
	Changed    int64         `json:"changed"`       // rows where enforcing does otherwise (would= is not admit)
	Refused    []ReasonCount `json:"refused"`       // requests enforcing would have answered itself, by reason
	RefusedAll int64         `json:"refused_total"` // the same, all reasons together
	Retried    int64         `json:"retried"`       // failed attempts enforcing would have retried on their seat
	FailedOver int64         `json:"failed_over"`   // attempts enforcing would have sent to a fallback seat
	// The retry tax enforcing would have saved: the tokens of the
	// requests it would have refused that did not succeed; and what it
	// would have cost: the tokens of the retries and failovers it would
	// have added, each as large as the attempt it repeats (the gate's own
	// estimate of a next attempt).
	TaxSavedTokens int64 `json:"retry_tax_saved_tokens"`
	TaxAddedTokens int64 `json:"retry_tax_added_tokens"`
	// AnswersLost are requests enforcing would have refused whose
	// forward succeeded: answers the policy would have cost.
	AnswersLost int64 `json:"answers_lost"`
	// PastDeadline are the jobs that ran past the deadline passed through
	// (their time through a row: spent_s + delay_s + elapsed_s): enforcing
	// ends each at the deadline (504) instead; DeadlineRefused, the
	// requests enforcing would have refused for the deadline.
	PastDeadline    int64 `json:"past_deadline_jobs"`
	DeadlineRefused int64 `json:"deadline_refused"`

	past map[string]bool
}

// ReasonCount is how many rows one refusal reason names.
type ReasonCount struct {
	Reason string `json:"reason"`
	Rows   int64  `json:"rows"`
}

// add counts one row a shadow proxy wrote (r.Would set) of job in file.
func (s *Shadow) add(r *ledgerfile.Row, file string, deadline time.Duration) {
	s.Rows++
	ok := r.Outcome == admit.OK
	switch r.Would {
	case "admit":
	case ledgerfile.WouldRetry, ledgerfile.WouldFallback:
		s.Changed++
		if r.Would == ledgerfile.WouldRetry {
			s.Retried++
		} else {
			s.FailedOver++
		}
		if !ok {
			s.TaxAddedTokens = admit.AddTokens(s.TaxAddedTokens, r.Tokens)
		}
	default:
		s.Changed++
		s.RefusedAll++
		d, _ := admit.ParseDecision(r.Would)
		reason := string(d.Reason)
		if i := slices.IndexFunc(s.Refused, func(c ReasonCount) bool { return c.Reason == reason }); i >= 0 {
			s.Refused[i].Rows++
		} else {
			s.Refused = append(s.Refused, ReasonCount{Reason: reason, Rows: 1})
		}
		if d.Reason == admit.ReasonDeadline {
			s.DeadlineRefused++
		}
		if ok {
			s.AnswersLost++
		} else {
			s.TaxSavedTokens = admit.AddTokens(s.TaxSavedTokens, r.Tokens)
		}
	}
	if deadline > 0 && admit.AddDuration(admit.AddDuration(r.SpentS, r.Delay), r.Elapsed) > deadline {
		if s.past == nil {
			s.past = map[string]bool{}
		}
		key := file + "\x00" + r.Job
		if r.Job == "" {
			key = file + "\x00#" + strconv.Itoa(r.Line) // a row without a job is a job of its own
		}
		if !s.past[key] {
			s.past[key] = true
			s.PastDeadline++
		}
	}
}

// close orders the refusals, most first (then by reason).
func (s *Shadow) close() {
	slices.SortStableFunc(s.Refused, func(a, b ReasonCount) int {
		if c := cmp.Compare(b.Rows, a.Rows); c != 0 {
			return c
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	s.past = nil
}
