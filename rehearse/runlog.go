package rehearse

import (
	"errors"
	"fmt"
	"os"

	"github.com/retrygate/retrygate/ledgerfile"
)

// ReserveRun picks the new run's number — one more than the highest in
// the log w appends to (ledgerfile.HighestRun) — and writes its `# run`
// line there (ledgerfile.RunText), both under the log's lock, so two runs
// into one log never share job ids.
func ReserveRun(w *ledgerfile.Writer, describe string) (int, error) {
	run := 0
	err := w.CommentLocked(func() (string, error) {
		f, err := os.Open(w.Path())
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("failed to read log %q: %w", w.Path(), err)
		}
		high := 0
		if f != nil {
			defer f.Close()
			if high, err = ledgerfile.HighestRun(f); err != nil {
				return "", fmt.Errorf("failed to read log %q: %w", w.Path(), err)
			}
		}
		run = high + 1
		return ledgerfile.RunText(run, describe), nil
	})
	return run, err
}
