package ledgerfile

import (
	"fmt"
	"io"

	"github.com/retrygate/retrygate/admit"
)

// NextAttempt is the number of a job's next attempt after its rows in file
// order (all of them, or a suffix from ReadJobTail whose first row carries
// `used`): one past the highest attempt seen, a hand-written row without
// a number counting as one more. It is an error past admit.MaxAttempts.
func NextAttempt(rows []Row) (int, error) {
	n := 0
	if len(rows) > 0 && rows[0].HasSpent {
		n = rows[0].Used // the attempts before the suffix
	}
	for i := range rows {
		if rows[i].Attempt > 0 {
			n = max(n, rows[i].Attempt)
		} else {
			n++
		}
	}
	if n >= admit.MaxAttempts {
		return 0, fmt.Errorf("job %q already has %d attempts, the most a log counts", truncate(rows[len(rows)-1].Job), n)
	}
	return n + 1, nil
}

// Record appends one attempt of row.Job to the log under its lock: it
// reads the end of the job's rows (ReadJobTail) and appends NextRow of
// them. Concurrent Record calls on one log, from any number of processes,
// never number two attempts alike.
func Record(w *Writer, row Row, rules Rules) (Row, error) {
	err := w.LockedTail(func(log io.ReaderAt, size int64) ([]Row, error) {
		earlier, err := ReadJobTail(log, size, w.Path(), row.Job, BookRows())
		if err != nil {
			return nil, err
		}
		if cfg := rules.Retry.Budget; cfg.Enabled() && !row.TS.IsZero() {
			window, err := ReadWindowTail(log, size, w.Path(), WindowCut(cfg, row.TS))
			if err != nil {
				return nil, err
			}
			rules.Window = BudgetOf(cfg, window)
		}
		if row, err = NextRow(earlier, row, rules); err != nil {
			return nil, err
		}
		return []Row{row}, nil
	})
	return row, err
}

// NextRow is a hand-recorded attempt as it is appended after the job's
// earlier rows (all of them, or BookRows' suffix), in any store: numbered
// after them, with the job's spend before it and the gate's decision on
// it, at the numbers the log will hold.
func NextRow(earlier []Row, row Row, rules Rules) (Row, error) {
	var err error
	if row.Attempt, err = NextAttempt(earlier); err != nil {
		return row, err
	}
	Normalize(&row) // the gate decides on the numbers the log will hold
	if rules.Window != nil && row.Attempt >= 2 && !row.TS.IsZero() {
		// The retry budget's counts go on the row: a replay judges it on them.
		row.Window, row.HasWindow = rules.Window.Window(row.TS), true
	}
	spent := JobSpend(earlier)
	row.SpentS, row.SpentTokens, row.SpentUSD, row.Used, row.HasSpent = spent.Time, spent.Tokens, spent.USD, spent.Attempts, true
	row.Decision = Decide(rules, earlier, &row).String()
	Normalize(&row)
	return row, nil
}
