package cmd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func proxyOptions(t *testing.T, config string, args ...string) (*ProxyOptions, error) {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(config), 0o644))
	ios, _, _, _ := TestStreams()
	f := &Factory{IO: ios, Now: time.Now, Getenv: func(string) string { return "" }, Ctx: context.Background()}
	var got *ProxyOptions
	c := newProxyCmd(f, func(o *ProxyOptions) error { got = o; return nil })
	c.SetArgs(args)
	c.SilenceErrors, c.SilenceUsage = true, true
	err := c.Execute()
	return got, err
}

const proxyConfig = `
budget: {deadline: 30s, max_attempts: 3}
seats:
  a: {kind: openai, base_url: "http://127.0.0.1:9/v1", model: m1}
  b: {kind: openai, base_url: "http://127.0.0.1:8/v1", model: m2}
  c: {kind: anthropic, base_url: "http://127.0.0.1:7/v1", model: m3}
fallback: [a, c, b]
`

func TestProxyOptions(t *testing.T) {
	o, err := proxyOptions(t, proxyConfig)
	require.NoError(t, err)
	names := func(o *ProxyOptions) (out []string) {
		for _, s := range o.Chain {
			out = append(out, s.Name)
		}
		return out
	}
	assert.Equal(t, []string{"a", "b"}, names(o), "the fallback chain, in the first seat's wire format")
	assert.Equal(t, []string{"c"}, o.Skipped)
	assert.Equal(t, "127.0.0.1:6557", o.Listen)
	assert.False(t, o.Remote)
	assert.Equal(t, 30*time.Second, o.Policy.Budget.Deadline)
	assert.Equal(t, 3, o.Policy.Budget.MaxAttempts)
	assert.Equal(t, "rehearsal.log", o.LogPath)

	o, err = proxyOptions(t, proxyConfig, "--seat", "B", "--max-attempts", "4", "--log", "p.log", "--listen", "localhost:0")
	require.NoError(t, err)
	assert.Equal(t, []string{"b", "a"}, names(o), "--seat first, then the rest of the chain")
	assert.Equal(t, 4, o.Policy.Budget.MaxAttempts)
	assert.Equal(t, "p.log", o.LogPath)
	assert.False(t, o.Remote)

	o, err = proxyOptions(t, proxyConfig, "--seat", "c")
	require.NoError(t, err)
	assert.Equal(t, []string{"c"}, names(o))
	assert.Equal(t, []string{"a", "b"}, o.Skipped)

	// Off loopback only when --listen names it, and then it is flagged.
	o, err = proxyOptions(t, proxyConfig, "--listen", "0.0.0.0:6557")
	require.NoError(t, err)
	assert.True(t, o.Remote)
}
