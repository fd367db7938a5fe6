package ledgerfile

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

func batchRow(job string, attempt int) Row {
	return Row{TS: time.Date(2026, 11, 30, 0, 0, attempt, 0, time.UTC), Job: job, Attempt: attempt, Seat: "s", Model: "m",
		Wait: time.Second, Elapsed: 2 * time.Second, Tokens: 30, Outcome: admit.OK, Billing: admit.Billable, Decision: "admit"}
}

func readBytes(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	require.NoError(t, err)
	return string(data)
}

// A batching writer's log holds the same bytes as a row-at-a-time
// writer's, comments after the rows appended before them.
func TestBatchWritesTheSameBytes(t *testing.T) {
	dir := t.TempDir()
	plain, batched := filepath.Join(dir, "plain.log"), filepath.Join(dir, "batched.log")
	pw, bw := NewWriter(plain, false), NewWriter(batched, false)
	bw.Batch(1<<20, time.Hour) // only Flush, Close and comments write
	for _, w := range []*Writer{pw, bw} {
		require.NoError(t, w.Comment("run r1"))
		for i := 1; i <= 20; i++ {
			r := batchRow(fmt.Sprintf("r1-%02d", i), 1)
			if i%2 == 0 {
				require.NoError(t, w.AppendOne(&r))
				continue
			}
			require.NoError(t, w.Append(r))
		}
		require.NoError(t, w.Comment("after twenty rows"))
		require.NoError(t, w.Append(batchRow("r1-21", 1), batchRow("r1-21", 2)))
	}
	require.NoError(t, pw.Close())
	assert.NotContains(t, readBytes(t, batched), "r1-21", "rows wait for the next write")
	assert.Contains(t, readBytes(t, batched), "job=r1-20 ", "a comment writes the rows before it first")
	require.NoError(t, bw.Close())
	assert.Equal(t, readBytes(t, plain), readBytes(t, batched))
	rows, _, err := ReadFile(batched)
	require.NoError(t, err)
	assert.Len(t, rows, 22)
}

// Rows are written once maxBytes of them are held, and within every of
// the first held row when fewer come.
func TestBatchWritesWhenFullOrDue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.log")
	w := NewWriter(path, false)
	defer w.Close()
	row := batchRow("r1-1", 1)
	size := len(AppendRow(nil, &row))
	w.Batch(3*size, time.Hour)
	require.NoError(t, w.Append(batchRow("r1-1", 1), batchRow("r1-2", 1)))
	assert.Equal(t, "", readBytes(t, path), "two rows are under the batch")
	require.NoError(t, w.Append(batchRow("r1-3", 1)))
	rows, _, err := ReadFile(path)
	require.NoError(t, err)
	assert.Len(t, rows, 3, "the third row filled the batch: all three written")

	w.Batch(1<<20, 10*time.Millisecond)
	require.NoError(t, w.Append(batchRow("r1-4", 1)))
	require.Eventually(t, func() bool {
		rows, _, err := ReadFile(path)
		return err == nil && len(rows) == 4
	}, 5*time.Second, 5*time.Millisecond, "a lone row is written when it is due")
}

// A batched write that fails is reported, and every later call fails
// too: the caller stops rather than go on with rows missing.
func TestBatchFailureIsReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "b.log")
	w := NewWriter(path, false)
	w.Batch(1<<20, time.Hour)
	require.NoError(t, w.Append(batchRow("r1-1", 1)), "held, not yet written")
	err := w.Flush()
	require.Error(t, err)
	assert.ErrorIs(t, w.Append(batchRow("r1-2", 1)), err)
	assert.ErrorIs(t, w.Close(), err)
}

// A row the log cannot hold is refused at Append, and nothing of its call
// is held.
func TestBatchRefusesABadRowWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.log")
	w := NewWriter(path, false)
	w.Batch(1<<20, time.Hour)
	bad := batchRow("r1-2", 1)
	bad.Outcome = "exploded"
	assert.ErrorContains(t, w.Append(batchRow("r1-1", 1), bad), "outcome")
	assert.ErrorContains(t, w.AppendOne(&bad), "outcome")
	require.NoError(t, w.Append(batchRow("r1-3", 1)))
	require.NoError(t, w.Close())
	rows, _, err := ReadFile(path)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, "r1-3", rows[0].Job)
}

// Batching writers in one log, as processes would be: each write is whole
// rows, so the strict reader reads every row of every writer.
func TestBatchManyWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.log")
	const writers, each = 8, 300
	var wg sync.WaitGroup
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := NewWriter(path, false)
			w.Batch(4<<10, time.Millisecond)
			for k := 1; k <= each; k++ {
				if err := w.Append(batchRow(fmt.Sprintf("w%d-%d", i, k), 1)); err != nil {
					t.Error(err)
					return
				}
			}
			if err := w.Close(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	rows, rd, err := ReadFile(path)
	require.NoError(t, err)
	assert.Len(t, rows, writers*each)
	assert.Empty(t, rd.Torn())
}
