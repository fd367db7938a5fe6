package ledgerfile

import (
	"io"
	"os"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// This file is the retry budget over a log (retry.budget): the first
// attempts and retries of every job sent in the window before a time, as
// record and admit --log count them from the rows the log holds.

// ReadWindowTail reads a log's rows from its end backwards, every job's,
// until a row that ended (ts + elapsed) at or before cut, and returns
// them in file order. A hand-recorded row is appended once its attempt
// has ended, so the rows above that one ended earlier still, and were
// sent before cut: the rows returned hold every send after cut that the
// log holds. The forward Reader's rules apply, as in ReadJobTail.
func ReadWindowTail(r io.ReaderAt, size int64, name string, cut time.Time) ([]Row, error) {
	all := func(*Row) bool { return true }
	ended := func(row *Row) bool { return !row.TS.IsZero() && !row.TS.Add(row.Elapsed).After(cut) }
	return readTail(r, size, name, nil, all, ended)
}

// WindowTail opens the log at path and reads it with ReadWindowTail.
func WindowTail(path string, cut time.Time) ([]Row, error) {
	return tailFile(path, func(f *os.File, size int64) ([]Row, error) {
		return ReadWindowTail(f, size, path, cut)
	})
}

// BudgetOf is the retry budget's window under cfg, fed every sent row of
// rows (Rules.Counted's rule): the counts a retry at any time after the
// rows' window start is judged on.
func BudgetOf(cfg admit.RetryBudgetConfig, rows []Row) *admit.RetryBudget {
	b := admit.NewRetryBudget(cfg)
	rules := Rules{Retry: admit.RetryPolicy{Budget: cfg}, Window: b}
	for i := range rows {
		rules.Counted(&rows[i])
	}
	return b
}

// WindowCut is how far back a log must be read for the retry budget's
// window at ts.
func WindowCut(cfg admit.RetryBudgetConfig, ts time.Time) time.Time { return ts.Add(-cfg.Window) }
