package cmd

import (
	"fmt"
	"strings"
	"time"

	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// A shadow proxy's log (`proxy --shadow`) has, in every form check
// writes, the figures of what enforcing the policy would change: the
// check result's Shadow, check --json's shadow, in the words below
// (text, GitHub, JUnit, HTML) and the figures' list (JUnit properties,
// the HTML table). No form computes a figure of its own.

// shadowWords is a shadow log's figures in a sentence and three lines:
// the decisions that change, then the retry tax, the answers lost and
// the deadline misses that change with them.
func shadowWords(s *summary.Shadow, deadline time.Duration) (head string, more []string) {
	var parts []string
	if s.RefusedAll > 0 {
		var by []string
		for _, r := range s.Refused {
			by = append(by, fmt.Sprintf("%s %d", r.Reason, r.Rows))
		}
		parts = append(parts, fmt.Sprintf("%d refused (%s)", s.RefusedAll, strings.Join(by, ", ")))
	}
	if s.Retried > 0 {
		parts = append(parts, fmt.Sprintf("%d retried", s.Retried))
	}
	if s.FailedOver > 0 {
		parts = append(parts, fmt.Sprintf("%d failed over", s.FailedOver))
	}
	what := "nothing"
	if len(parts) > 0 {
		what = strings.Join(parts, ", ")
	}
	head = fmt.Sprintf("shadow log: enforcing this policy changes %d of %d forwarded %s: %s",
		s.Changed, s.Rows, plural(int(s.Rows), "request", "requests"), what)
	more = []string{
		fmt.Sprintf("retry tax: %d tokens saved (refused requests that failed); about %d tokens added (retries and failovers, each as large as the attempt it repeats)",
			s.TaxSavedTokens, s.TaxAddedTokens),
		fmt.Sprintf("answers lost: %d (refused requests whose forward answered ok)", s.AnswersLost),
		fmt.Sprintf("deadline misses: %d %s ran past the %s deadline passed through (enforcing answers 504 at it); %d %s refused for the deadline",
			s.PastDeadline, plural(int(s.PastDeadline), "job", "jobs"), deadline, s.DeadlineRefused, plural(int(s.DeadlineRefused), "request", "requests")),
	}
	return head, more
}

// shadowFigure is one figure of a shadow log: Path is where check --json
// has it, Name the JUnit property's name.
type shadowFigure struct {
	Path, Name, Label string
	N                 int64
}

// shadowFigures lists a shadow log's figures in the order the words say
// them; a refusal reason's count follows the refusals' total.
func shadowFigures(s *summary.Shadow) []shadowFigure {
	f := func(key, label string, n int64) shadowFigure {
		return shadowFigure{Path: "shadow." + key, Name: "shadow." + key, Label: label, N: n}
	}
	out := []shadowFigure{
		f("rows", "requests forwarded", s.Rows),
		f("changed", "requests enforcing changes", s.Changed),
		f("refused_total", "refused", s.RefusedAll),
	}
	for i, r := range s.Refused {
		out = append(out, shadowFigure{Path: fmt.Sprintf("shadow.refused.%d.rows", i), Name: "shadow.refused." + r.Reason,
			Label: "refused: " + r.Reason, N: r.Rows})
	}
	return append(out,
		f("retried", "retried on their seat", s.Retried),
		f("failed_over", "failed over to a later seat", s.FailedOver),
		f("retry_tax_saved_tokens", "retry tax saved (tokens)", s.TaxSavedTokens),
		f("retry_tax_added_tokens", "retry tax added (tokens, about)", s.TaxAddedTokens),
		f("answers_lost", "answers lost", s.AnswersLost),
		f("past_deadline_jobs", "jobs past the deadline", s.PastDeadline),
		f("deadline_refused", "refused for the deadline", s.DeadlineRefused),
	)
}
