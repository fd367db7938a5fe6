package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// rehearse holds its rows and writes them in batches: stopped mid-run
// (Ctrl-C), the log still holds every row the run counted, and every job
// in it has its job_end, on whole lines.
func TestRehearseInterruptedLogIsWhole(t *testing.T) {
	srv, err := seatserver.New(seatserver.Options{Format: seatserver.OpenAI, Planner: proxyPlans{
		{TTFB: 2 * time.Millisecond, Wait: 5 * time.Millisecond, Elapsed: 10 * time.Millisecond, PromptTokens: 20, CompletionTokens: 10},
	}})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sctx, stopServer := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { _ = srv.Serve(sctx, ln); close(served) }()
	t.Cleanup(func() { stopServer(); <-served })

	dir := t.TempDir()
	cfg := fmt.Sprintf("seats:\n  up: {kind: openai, base_url: \"http://%s/v1\", model: gpt-4o-mini}\nfallback: [up]\n", ln.Addr())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(cfg), 0o644))
	ctx, interrupt := context.WithCancel(context.Background())
	// Ctrl-C once some rows are written and more are coming: a real delay
	// against a real server, bounded below by rows, not by the clock.
	go func() {
		deadline := time.After(10 * time.Second)
		for srv.Total() < 50 {
			select {
			case <-deadline:
				interrupt()
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		interrupt()
	}()
	code, out, errOut := rehearseRun(t, dir, ctx, "--jobs", "100000", "--concurrency", "8", "--json")
	assert.Equal(t, ExitRefuse, code, errOut)
	var got rehearseJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.True(t, got.Interrupted)

	rows, rd, err := ledgerfile.ReadFile(filepath.Join(dir, "rehearsal.log"))
	require.NoError(t, err)
	assert.Empty(t, rd.Torn())
	require.Len(t, got.Seats, 1)
	assert.GreaterOrEqual(t, len(rows), 50)
	assert.EqualValues(t, got.Seats[0].Attempts, len(rows), "every attempt the run counted is in the log")
	ended := map[string]string{}
	for _, r := range rows {
		if r.JobEnd != "" {
			ended[r.Job] = r.JobEnd
		}
	}
	for _, r := range rows {
		assert.Contains(t, ended, r.Job, "job %s has no job_end row", r.Job)
	}
	assert.Equal(t, got.Jobs.Total, len(ended))
}
