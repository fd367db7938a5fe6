package seat

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/realtime"
)

func execSeatFor(t *testing.T, script string) Seat {
	t.Helper()
	s, err := New(Config{Name: "local", Kind: "exec", Model: "gpt-4o-mini", Command: []string{"sh", "-c", script}}, testEnv)
	require.NoError(t, err)
	return s
}

func TestExecSeat(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("uses sh")
	}
	codec, err := codecFor("gpt-4o-mini", "")
	require.NoError(t, err)
	tests := []struct {
		name       string
		script     string
		prompt     string
		want       admit.Outcome
		wait, end  time.Duration // scripted; 0: not checked
		hasWait    bool
		prompt_    int64
		completion int64
		from       string
		detail     string
	}{
		{name: "echoes stdin, tokens counted", script: "sleep 0.1; cat; sleep 0.1", prompt: "hello there friend",
			want: admit.OK, wait: 100 * time.Millisecond, end: 200 * time.Millisecond, hasWait: true,
			prompt_: 3, completion: countTokens(codec, "hello there friend"), from: FromTokenizer},
		{name: "usage line wins", script: `cat >/dev/null; sleep 0.05; echo "some answer"; echo '{"usage":{"prompt_tokens":11,"completion_tokens":22}}'`,
			want: admit.OK, wait: 50 * time.Millisecond, hasWait: true, prompt_: 11, completion: 22, from: FromUsage},
		{name: "usage line then blank lines", script: `echo answer; printf '{"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\n\n'`,
			want: admit.OK, hasWait: true, prompt_: 1, completion: 2, from: FromUsage},
		{name: "a usage line not last is text", script: `echo '{"usage":{"prompt_tokens":1,"completion_tokens":2}}'; echo tail`,
			want: admit.OK, hasWait: true, from: FromTokenizer, prompt_: -1, completion: -1},
		{name: "usage line after long output", script: `head -c 20000 /dev/zero | tr '\0' 'a'; echo; echo '{"usage":{"prompt_tokens":1,"completion_tokens":2}}'`,
			want: admit.OK, hasWait: true, prompt_: 1, completion: 2, from: FromUsage},
		{name: "a line past the usage bound is text", script: `printf '{"usage":{"prompt_tokens":1,"completion_tokens":2}, "pad": "%05000d"}\n' 0`,
			want: admit.OK, hasWait: true, from: FromTokenizer, prompt_: -1, completion: -1},
		{name: "no output", script: "cat >/dev/null", want: admit.OK, from: FromTokenizer, prompt_: -1},
		{name: "non-zero exit", script: "echo secret-completion-text; exit 3", want: admit.ServerError, hasWait: true,
			detail: "exit status 3", from: FromTokenizer, prompt_: -1, completion: -1},
		{name: "killed by a signal", script: "kill -9 $$", want: admit.ServerError, detail: "signal: killed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := execSeatFor(t, tt.script)
			obs := do(t, s, 5*time.Second, Request{Prompt: tt.prompt})
			assert.Equal(t, tt.want, obs.Outcome, obs.Detail)
			assert.Equal(t, tt.hasWait, obs.HasWait)
			assert.False(t, obs.HasTTFB, "a command has no headers")
			assert.Equal(t, tt.detail, obs.Detail)
			assert.NotContains(t, obs.Detail, "secret-completion-text")
			assert.Equal(t, tt.from, obs.TokensFrom)
			if tt.prompt_ >= 0 && tt.from != "" {
				assert.Equal(t, tt.prompt_, obs.PromptTokens)
			}
			if tt.completion > 0 {
				assert.Equal(t, tt.completion, obs.CompletionTokens)
			}
			// The script's own process starts (sh, sleep) land inside these
			// figures and swing with machine load, so only the order and a
			// loose ceiling are asserted; the HTTP seats' tests hold the
			// tight timing bounds.
			if tt.wait > 0 {
				logTiming(t, "exec", "wait", tt.wait, obs.Wait)
				assert.GreaterOrEqual(t, obs.Wait, tt.wait-earlyTol)
				assert.Less(t, obs.Wait, realtime.By(tt.wait))
				assert.LessOrEqual(t, obs.Wait, obs.Elapsed)
			}
			if tt.end > 0 {
				logTiming(t, "exec", "elapsed", tt.end, obs.Elapsed)
				assert.GreaterOrEqual(t, obs.Elapsed, tt.end-earlyTol)
				assert.Less(t, obs.Elapsed, realtime.By(tt.end))
			}
		})
	}
}

func TestExecCommandNotFound(t *testing.T) {
	for _, argv := range [][]string{{"retrygate-no-such-command-xyz"}, {"/nonexistent/dir/cmd"}} {
		s, err := New(Config{Name: "x", Kind: "exec", Command: argv}, testEnv)
		require.NoError(t, err)
		obs := do(t, s, time.Second, Request{})
		assert.Equal(t, admit.ConnError, obs.Outcome)
		assert.Equal(t, admit.Free, obs.Billing)
		assert.Equal(t, "command not found", obs.Detail)
	}
}

// TestExecTimeoutsKillTheGroup: the hard timeout and the wait cap kill
// the command and its children, and end within +100 ms.
func TestExecTimeoutsKillTheGroup(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("process groups")
	}
	tests := []struct {
		name    string
		script  string
		waitCap time.Duration
		limit   time.Duration
		want    admit.Outcome
		hasWait bool
	}{
		{"hard timeout mid-output", "echo started; sleep 30 & echo $! > %s; wait", 0, 400 * time.Millisecond, admit.Timeout, true},
		{"wait cap before output", "sleep 30 & echo $! > %s; wait", 150 * time.Millisecond, 150 * time.Millisecond, admit.WaitCap, false},
		// Issue 12, case 10: a grandchild that left the process group.
		{"hard timeout, setsid grandchild", "echo started; setsid sleep 60 & echo $! > %s; sleep 30", 0, 400 * time.Millisecond, admit.Timeout, true},
		{"hard timeout, double-forked setsid grandchild", "echo started; (setsid sleep 60 & echo $! > %s) ; sleep 30", 0, 400 * time.Millisecond, admit.Timeout, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "child.pid")
			s := execSeatFor(t, strings.Replace(tt.script, "%s", pidFile, 1))
			start := time.Now()
			obs := do(t, s, 400*time.Millisecond, Request{WaitCap: tt.waitCap})
			took := time.Since(start)
			t.Logf("CANCEL kind=exec case=%q limit_ms=%.0f returned_ms=%.3f", tt.name, ms(tt.limit), ms(took))
			assert.Equal(t, tt.want, obs.Outcome, obs.Detail)
			assert.Equal(t, admit.Ambiguous, obs.Billing)
			assert.Equal(t, tt.hasWait, obs.HasWait)
			assert.GreaterOrEqual(t, took, tt.limit)
			// The grandchildren sleep 30 s or more: a ceiling only
			// waiting for them reaches (realtime), not load.
			assert.Less(t, took, realtime.By(tt.limit))

			// The grandchild (sleep 30) is gone too.
			b, err := os.ReadFile(pidFile)
			require.NoError(t, err)
			var pid int
			_, err = fmt.Sscan(strings.TrimSpace(string(b)), &pid)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return gone(pid) }, time.Second, 10*time.Millisecond,
				"child %d survived the attempt", pid)
		})
	}
}

// TestExecSetsidChildAfterExit: a command that exits cleanly leaving a
// setsid grandchild behind does not leave it running.
func TestExecSetsidChildAfterExit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds descendants through /proc")
	}
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	s := execSeatFor(t, "setsid sleep 60 & echo $! > "+pidFile+"; echo answer")
	obs := do(t, s, 3*time.Second, Request{})
	assert.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscan(strings.TrimSpace(string(b)), &pid)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return gone(pid) }, time.Second, 10*time.Millisecond, "setsid child %d survived", pid)
}

// TestExecBackgroundChildHoldingStdout: a command that exits while a
// child it left behind keeps stdout open ends at its exit (plus the
// bounded pipe wait), not at the hard timeout.
func TestExecBackgroundChildHoldingStdout(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("uses sh")
	}
	s := execSeatFor(t, "echo answer; sleep 30 &")
	obs := do(t, s, 3*time.Second, Request{})
	assert.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	// Waiting for the background child would have run to the 3 s hard
	// timeout (and said timeout): ended before it is the claim.
	assert.Less(t, obs.Elapsed, 3*time.Second)
}

// gone reports a process that no longer runs: absent, or a zombie (in a
// container whose init does not reap orphans, a killed orphan stays one).
func gone(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return runtime.GOOS == "linux" // no /proc entry: gone
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}
