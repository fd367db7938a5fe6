package ledgerfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// TestWindowTail: the retry budget's window over a log, every job's
// rows, read back from the end to the first row that ended before the
// window: rows above it are not read, and the counts are the sends in
// the window (a refused row sent nothing).
func TestWindowTail(t *testing.T) {
	log := Header + "\n" + strings.Join([]string{
		`ts=2026-12-01T10:00:00Z job=old attempt=1 wait_s=1 elapsed_s=2 tokens=1 outcome=server_error decision=admit`,
		`ts=2026-12-01T10:00:05Z job=early attempt=1 wait_s=1 elapsed_s=2 tokens=1 outcome=ok decision=admit`,
		`ts=2026-12-01T10:00:20Z job=a attempt=1 wait_s=1 elapsed_s=2 tokens=1 outcome=server_error decision=admit`,
		`ts=2026-12-01T10:00:21Z job=b attempt=1 wait_s=1 elapsed_s=2 tokens=1 outcome=server_error decision=admit`,
		`ts=2026-12-01T10:00:24Z job=a attempt=2 wait_s=1 elapsed_s=2 tokens=1 outcome=ok decision=admit`,
		`ts=2026-12-01T10:00:25Z job=b attempt=2 wait_s=0 elapsed_s=0 tokens=0 decision="refuse: retry budget" sent=false`,
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "run.log")
	require.NoError(t, os.WriteFile(path, []byte(log), 0o644))
	at := time.Date(2026, 12, 1, 10, 0, 26, 0, time.UTC)
	cfg := admit.RetryBudgetConfig{Ratio: 0.5, Window: 10 * time.Second}
	rows, err := WindowTail(path, WindowCut(cfg, at))
	require.NoError(t, err)
	var jobs []string
	for _, r := range rows {
		jobs = append(jobs, r.Job)
	}
	// "early" ended at 10:00:07, before the window (10:00:16): the read
	// stops there, and "old" above it is never read.
	assert.Equal(t, []string{"early", "a", "b", "a", "b"}, jobs)
	assert.Equal(t, admit.BudgetWindow{Firsts: 2, Retries: 1}, BudgetOf(cfg, rows).Window(at))
}
