package cmd

import (
	"context"
	"fmt"
	"net"
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

func progressRows(jobs int) []*ledgerfile.Row {
	var rows []*ledgerfile.Row
	for j := 1; j <= jobs; j++ {
		job := fmt.Sprintf("r1-%d", j)
		rows = append(rows,
			&ledgerfile.Row{Job: job, Attempt: 1, Seat: "scratch", Outcome: admit.ServerError, Decision: "admit"},
			&ledgerfile.Row{Job: job, Attempt: 2, Seat: "scratch", Outcome: admit.OK, Decision: "admit", JobEnd: "succeeded"})
	}
	return rows
}

// lastDraw is what a terminal shows last on the bar's line: the text after
// the final carriage return.
func lastDraw(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndex(s, "\r")+1:]
}

// Rows far faster than the bar's throttle: the bar still ends at 100%,
// with every job counted, on its own line.
func TestRehearseProgressEndsAtFull(t *testing.T) {
	ios, _, out, errOut := TestStreams()
	ios.OutTTY, ios.ErrTTY = true, true
	p := newAttemptPrinter(ios, false, false, 3)
	require.NotNil(t, p.bar)
	for _, r := range progressRows(3) {
		p.row(r)
	}
	p.finish(false)
	got := errOut.String()
	assert.True(t, strings.HasSuffix(got, "\n"), "the full bar keeps its line: %q", got)
	assert.Contains(t, lastDraw(got), "100%")
	assert.Contains(t, lastDraw(got), "(3/3")
	assert.Contains(t, lastDraw(got), "rehearsed")
	assert.Empty(t, out.String(), "a real-time run on a terminal prints its tables at the end")
}

// Interrupted, the bar is erased: a full bar would say every job ran.
func TestRehearseProgressInterruptedIsErased(t *testing.T) {
	ios, _, _, errOut := TestStreams()
	ios.OutTTY, ios.ErrTTY = true, true
	p := newAttemptPrinter(ios, false, false, 3)
	for _, r := range progressRows(3)[:2] {
		p.row(r)
	}
	p.finish(true)
	assert.NotContains(t, lastDraw(errOut.String()), "100%")
	assert.Empty(t, strings.TrimSpace(lastDraw(errOut.String())))
}

// rehearse | tee run.txt on a terminal: rows go through the pipe and come
// back to the terminal, so stderr draws nothing that could share a line
// with them; the rows are the progress.
func TestRehearseNoBarWhenStdoutIsAPipe(t *testing.T) {
	ios, _, out, errOut := TestStreams()
	ios.OutTTY, ios.ErrTTY = false, true
	p := newAttemptPrinter(ios, false, false, 2)
	assert.Nil(t, p.bar)
	for _, r := range progressRows(2) {
		p.row(r)
	}
	p.soft("r1-1", "scratch", 6*time.Second, 6*time.Second)
	p.finish(false)
	assert.Equal(t, 5, strings.Count(out.String(), "\n"), "a header and four rows")
	assert.NotContains(t, errOut.String(), "\r")
	assert.NotContains(t, errOut.String(), "%")
	assert.Equal(t, "retrygate: r1-1 on scratch: still waiting after 6.000s (timeouts.soft 6s)\n", errOut.String())

	// stderr not a terminal either (rehearse 2>err.txt | tee run.txt): no
	// bar, but the "still waiting" note docs/rehearse.md promises, a whole
	// line on stderr, worded as time words it.
	ios, _, _, errOut = TestStreams()
	p = newAttemptPrinter(ios, false, false, 2)
	p.soft("r1-3", "live", 6012*time.Millisecond, 6*time.Second)
	assert.Equal(t, "retrygate: "+stillWaiting("r1-3", "live", 6012*time.Millisecond, 6*time.Second)+"\n", errOut.String())
	assert.Equal(t, "retrygate: r1-3 on live: still waiting after 6.012s (timeouts.soft 6s)\n", errOut.String())
}

// stdout to a file (rehearse > run.txt): nothing else reaches the terminal,
// so the bar draws; so it does with --json, printed after the bar ends.
func TestRehearseBarWhenStdoutIsAFileOrJSON(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "run.txt"))
	require.NoError(t, err)
	defer f.Close()
	ios, _, _, _ := TestStreams()
	ios.Out, ios.ErrTTY = f, true
	p := newAttemptPrinter(ios, false, false, 1)
	assert.NotNil(t, p.bar)
	p.finish(true)

	ios, _, _, _ = TestStreams()
	ios.ErrTTY = true
	p = newAttemptPrinter(ios, true, false, 1)
	assert.NotNil(t, p.bar)
	p.finish(true)

	p = newAttemptPrinter(ios, false, true, 1)
	assert.Nil(t, p.bar, "a virtual run is over at once")
}

// A wrong port: every attempt is conn_error. The run says so, naming the
// seat and its base URL without the query, and exits 0: a failing seat is
// data (the rows), as README.md and docs/rehearse.md say, not a tool error.
func TestRehearseNothingConnects(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	dir := t.TempDir()
	cfg := `budget: {deadline: 10s, token_ceiling: 8000, max_attempts: 2, max_wait: 5s}
retry: {base_delay: 1ms, max_delay: 2ms}
seats:
  local: {kind: openai, base_url: "http://` + addr + `/v1?api-version=2024-10-21&sig=` + secretMark + `", model: m}
fallback: [local]
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(cfg), 0o644))
	code, out, errOut := rehearseRun(t, dir, context.Background(), "--jobs", "2", "--seed", "1")
	assert.Equal(t, ExitOK, code, errOut)
	assert.Contains(t, errOut, "retrygate: warning: every attempt failed to connect (4 of 4, conn_error): seat local (http://"+addr+"/v1)\n")
	assert.Contains(t, errOut, "retrygate: hint: is the server up, and is the port right?")
	assert.Equal(t, 4, strings.Count(out, "\tconn_error\t"), "the rows and the summary come first")
	secretLeak(t, "stderr", errOut)
	secretLeak(t, "stdout", out)
	assert.NotContains(t, errOut, "api-version")
}

func TestSafeURL(t *testing.T) {
	assert.Equal(t, "https://x.openai.azure.com/openai/deployments/d", safeURL("https://x.openai.azure.com/openai/deployments/d?api-version=2024-10-21"))
	assert.Equal(t, "http://127.0.0.1:8080/v1", safeURL("http://user:pw@127.0.0.1:8080/v1?#frag"))
	assert.Equal(t, "", safeURL("::not a url"))
	assert.Equal(t, "", safeURL(""))
}
