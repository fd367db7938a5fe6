package store

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

func TestFileExportIsTheWritersBytes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rehearsal.log")
	w := ledgerfile.NewWriter(path, false)
	require.NoError(t, w.Comment("run r1 seed=1"))
	require.NoError(t, w.Append(ledgerfile.Row{Job: "a", Attempt: 1, Wait: time.Second, Tokens: 3, Outcome: admit.OK}))
	require.NoError(t, w.Comment("policy budget.deadline=45s"))
	require.NoError(t, w.Append(ledgerfile.Row{Job: "a", Attempt: 2, Tokens: 4, Note: "x y"}))
	require.NoError(t, w.Close())
	want, err := os.ReadFile(path)
	require.NoError(t, err)

	var got bytes.Buffer
	require.NoError(t, Export(ctx, OpenFile(path, false), &got))
	assert.Equal(t, string(want), got.String())

	var comments []string
	require.NoError(t, OpenFile(path, false).CommentLocked(ctx, func(c []string) (string, error) {
		comments = c
		return "run r2", nil
	}))
	assert.Equal(t, []string{"# run r1 seed=1", "# policy budget.deadline=45s"}, comments)
}

func TestFileImportAllOrNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dst := OpenFile(filepath.Join(dir, "dst.log"), false)
	src := "# a comment\njob=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\nwait_s=1 elapsed_s=1 tokens=2\n"
	n, err := dst.Import(ctx, Entries(strings.NewReader(src), "src.log"))
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)

	_, err = dst.Import(ctx, Entries(strings.NewReader("job=b attempt=1 wait_s=1 elapsed_s=1 tokens=1\n"+src), "again.log"))
	require.ErrorIs(t, err, ErrDuplicate)
	assert.Contains(t, err.Error(), "(a, 1)")
	rows, err := dst.ReadJob(ctx, "")
	require.NoError(t, err)
	assert.Len(t, rows, 2, "nothing of the refused file was written")

	_, err = dst.Import(ctx, Entries(strings.NewReader("job=c attempt=1 wait_s=x elapsed_s=1 tokens=1\n"), "bad.log"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bad.log: line 1: ")
}
