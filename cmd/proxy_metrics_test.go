package cmd

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProxyLogReady: a file log is ready while it can be appended to;
// once it is gone from its path (removed under the proxy), it is not,
// and the reason names it.
func TestProxyLogReady(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rehearsal.log")
	lg, books, err := openProxyLog(ctx, io.Discard, path)
	require.NoError(t, err)
	require.Nil(t, books)
	defer lg.Close()
	_, err = lg.reserve("proxy test")
	require.NoError(t, err)
	require.NoError(t, lg.ready(ctx))

	require.NoError(t, os.Remove(path))
	err = lg.ready(ctx)
	require.ErrorContains(t, err, "log "+path+": no such file or directory")

	require.NoError(t, os.Mkdir(path, 0o755))
	require.Error(t, lg.ready(ctx), "a directory takes no rows")
}
