package cmd

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore/pgtest"
)

// A run is numbered past the highest run a log names, in a `# run rN`
// line or a job id rN-k, by one rule whether the log is a file or a
// database: rows of run r7 whose `# run` line is lost (a log put together
// by hand, or with a torn line) still make the next run r8, not r4.
func TestReserveRunFileAndDatabase(t *testing.T) {
	ctx := context.Background()
	logs := map[string]string{"file": filepath.Join(t.TempDir(), "rehearsal.log")}
	if !testing.Short() {
		u := pgtest.DB(t)
		_, err := pgstore.Init(ctx, u)
		require.NoError(t, err)
		logs["database"] = u
	}
	for name, path := range logs {
		t.Run(name, func(t *testing.T) {
			l, err := openLog(ctx, io.Discard, path, false)
			require.NoError(t, err)
			require.NoError(t, l.CommentLocked(ctx, func([]string) (string, error) { return "run r3 seed=1", nil }))
			require.NoError(t, l.Append(ctx, ledgerfile.Row{Job: "r7-1", Attempt: 1, Seat: "s", Outcome: "ok", Decision: "admit"}))
			require.NoError(t, l.Close())

			w, err := openRunLog(ctx, io.Discard, path)
			require.NoError(t, err)
			defer w.Close()
			run, err := w.reserve("seed=2")
			require.NoError(t, err)
			assert.Equal(t, 8, run, "one past the job id r7-1")
			run, err = w.reserve("seed=3")
			require.NoError(t, err)
			assert.Equal(t, 9, run, "one past the `# run r8` line just written")
		})
	}
}
