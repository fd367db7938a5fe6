package cmd

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProxyLogReady: a file log is ready while its path is a regular
// file, or nothing yet in a directory (the next row makes it again); a
// directory or a FIFO at the path is not, and the check answers at once
// (it opens nothing: a FIFO would hold an open for writing forever).
func TestProxyLogReady(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rehearsal.log")
	lg, err := openRunLog(ctx, io.Discard, path)
	require.NoError(t, err)
	require.Nil(t, lg.books())
	defer lg.Close()
	_, err = lg.reserve("proxy test")
	require.NoError(t, err)
	require.NoError(t, lg.ready(ctx))

	require.NoError(t, os.Remove(path))
	require.NoError(t, lg.ready(ctx), "the next row makes the log again")

	require.NoError(t, os.Mkdir(path, 0o755))
	require.ErrorContains(t, lg.ready(ctx), "log "+path+": a directory, not a regular file")
	require.NoError(t, os.Remove(path))

	require.NoError(t, syscall.Mkfifo(path, 0o644))
	require.ErrorContains(t, lg.ready(ctx), "log "+path+": a FIFO, not a regular file")

	gone := filepath.Join(t.TempDir(), "gone", "rehearsal.log")
	lg2, err := openRunLog(ctx, io.Discard, gone)
	require.NoError(t, err)
	defer lg2.Close()
	require.ErrorContains(t, lg2.ready(ctx), "its directory")
}

// TestMetricsAddr: --metrics is off unless given, host:port, and off
// loopback only as named (then warned about when it listens).
func TestMetricsAddr(t *testing.T) {
	for _, c := range []struct {
		addr   string
		remote bool
		bad    bool
	}{
		{addr: ""},
		{addr: "127.0.0.1:9464"},
		{addr: "[::1]:9464"},
		{addr: "localhost:9464"},
		{addr: "10.1.2.3:9464", remote: true},
		{addr: ":9464", remote: true},
		{addr: "9464", bad: true},
	} {
		o := &ProxyOptions{Metrics: c.addr}
		err := o.checkMetricsAddr()
		if c.bad {
			require.ErrorContains(t, err, "--metrics: not host:port", c.addr)
			continue
		}
		require.NoError(t, err, c.addr)
		require.Equal(t, c.remote, o.MetricsRemote, c.addr)
	}
}
