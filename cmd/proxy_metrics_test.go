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
	lg, err := openRunLog(ctx, io.Discard, path)
	require.NoError(t, err)
	require.Nil(t, lg.books())
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
