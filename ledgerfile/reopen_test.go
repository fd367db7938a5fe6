//go:build unix

package ledgerfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A log removed, or replaced by another file, under a writer that keeps
// it open: the next row goes to the file at the log's path (made anew,
// with its header and the comment OnReopen gave), never to the file
// nobody can read any more; each reopen is told once.
func TestWriterReopensAMovedLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rehearsal.log")
	w := NewWriter(path, false)
	defer w.Close()
	var told []string
	w.OnReopen(func(why string) string {
		told = append(told, why)
		return "event log what=reopened reason=" + why
	})
	require.NoError(t, w.Append(Row{Job: "a", Attempt: 1, Tokens: 1}))

	require.NoError(t, os.Remove(path))
	require.NoError(t, w.Append(Row{Job: "b", Attempt: 1, Tokens: 1}))
	data, err := os.ReadFile(path)
	require.NoError(t, err, "the row made the log again at its path")
	assert.Equal(t, Header+"\n# event log what=reopened reason=removed\njob=b attempt=1", firstLines(string(data), 3))
	require.NoError(t, w.Append(Row{Job: "b", Attempt: 2, Tokens: 1}))

	// Another file put at the path (a rotation: mv, then a new file).
	require.NoError(t, os.Rename(path, path+".1"))
	require.NoError(t, os.WriteFile(path, []byte(Header+"\n"), 0o644))
	require.NoError(t, w.Append(Row{Job: "c", Attempt: 1, Tokens: 1}))
	data, _ = os.ReadFile(path)
	assert.Equal(t, Header+"\n# event log what=reopened reason=replaced\njob=c attempt=1", firstLines(string(data), 3))
	old, _ := os.ReadFile(path + ".1")
	assert.Equal(t, 2, strings.Count(string(old), "job=b"), "the rotated file keeps its rows and gets no more")
	assert.NotContains(t, string(old), "job=c")
	assert.Equal(t, []string{"removed", "replaced"}, told)
}

// A FIFO at the log's path is refused at once (the writer never waits on
// it); once a file is back, rows resume there.
func TestWriterFIFOAtThePath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rehearsal.log")
	w := NewWriter(path, false)
	defer w.Close()
	require.NoError(t, w.Append(Row{Job: "a", Attempt: 1, Tokens: 1}))
	require.NoError(t, os.Remove(path))
	require.NoError(t, syscall.Mkfifo(path, 0o644))
	err := w.Append(Row{Job: "b", Attempt: 1, Tokens: 1})
	require.ErrorContains(t, err, "not a regular file")
	require.NoError(t, os.Remove(path))
	require.NoError(t, w.Append(Row{Job: "b", Attempt: 1, Tokens: 1}))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), "job=b attempt=1")
}

// firstLines is the first n lines of s, cut after the nth line's job and
// attempt keys.
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)[:n]
	last := strings.Fields(lines[n-1])
	if len(last) > 2 {
		last = last[:2]
	}
	lines[n-1] = strings.Join(last, " ")
	return strings.Join(lines, "\n")
}
