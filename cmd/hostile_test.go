package cmd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/realtime"
)

// hostileHard is the hard timeout every hostile case runs under; the
// wait cap is well above it, so a silent server ends in timeout.
const hostileHard = time.Second

// hostileStartup is what a whole process adds to its one attempt: start-up,
// the log's write and exit. With realtime.By it makes the process's
// ceiling: a process that outlives its attempt waiting for the server
// (which holds on for 5 s or for ever) reaches it; load does not.
const hostileStartup = time.Second

// hostileMaxRSS is the most memory the rehearse process may hold, in KiB.
const hostileMaxRSS = 100 << 10

// hostileServer accepts connections on 127.0.0.1 and, once a request is
// read, hands the raw connection to serve: these servers misbehave in
// ways net/http would not write. stop closes when the test ends.
func hostileServer(t *testing.T, serve func(c net.Conn, stop <-chan struct{})) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	stop := make(chan struct{})
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				serve(c, stop)
			}()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func hostileStopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// hostileChunk is one OpenAI chat.completion.chunk carrying text.
func hostileChunk(text string) string {
	return `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + text + `"}}]}` + "\n\n"
}

const hostileSSEHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"

// hostileCases are the servers of issue 7, point 4, with the outcome each
// attempt must end in.
var hostileCases = []struct {
	name    string
	outcome admit.Outcome
	serve   func(c net.Conn, stop <-chan struct{})
}{
	{"slowloris headers", admit.Timeout, func(c net.Conn, stop <-chan struct{}) {
		// The status line, then one header byte every 20 ms for ever.
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Slow: "); err != nil {
			return
		}
		for !hostileStopped(stop) {
			if _, err := c.Write([]byte{'a'}); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond) // the server's pace, not a test clock
		}
	}},
	{"endless stream", admit.Timeout, func(c net.Conn, stop <-chan struct{}) {
		// Valid chunks as fast as the client reads them, never [DONE].
		var b strings.Builder
		for b.Len() < 32<<10 {
			b.WriteString(hostileChunk(" the and of to in"))
		}
		batch := []byte(b.String())
		if _, err := io.WriteString(c, hostileSSEHead); err != nil {
			return
		}
		for !hostileStopped(stop) {
			if _, err := c.Write(batch); err != nil {
				return
			}
		}
	}},
	{"1 GB body", admit.ServerError, func(c net.Conn, stop <-chan struct{}) {
		// A whole JSON answer of 1 GiB, made as it is written.
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 1<<30)
		hostileFill(c, stop, []byte(`{"choices":[{"message":{"content":"`), 1<<30)
	}},
	{"1 GB error body", admit.ServerError, func(c net.Conn, stop <-chan struct{}) {
		fmt.Fprintf(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 1<<30)
		hostileFill(c, stop, []byte(`{"error":{"code":"server_error","message":"`), 1<<30)
	}},
	{"single 100 MB line", admit.ServerError, func(c net.Conn, stop <-chan struct{}) {
		if _, err := io.WriteString(c, hostileSSEHead+`data: {"choices":[{"delta":{"content":"`); err != nil {
			return
		}
		hostileFill(c, stop, nil, 100<<20)
		_, _ = io.WriteString(c, `"}}]}`+"\n\ndata: [DONE]\n\n")
	}},
	{"invalid UTF-8", admit.OK, func(c net.Conn, stop <-chan struct{}) {
		_, _ = io.WriteString(c, hostileSSEHead+hostileChunk("caf\xe9 \xff\xfe \xc3\x28")+hostileChunk(" ok")+
			`data: {"id":"c","object":"chat.completion.chunk","model":"m\xff","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`+"\n\n"+
			"data: [DONE]\n\n")
	}},
	{"invalid UTF-8 error", admit.RateLimited, func(c net.Conn, stop <-chan struct{}) {
		body := `{"error":{"code":"rate_limit\xff\xfe","message":"slow down \xc3\x28"}}`
		fmt.Fprintf(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}},
	{"wrong content type", admit.ServerError, func(c net.Conn, stop <-chan struct{}) {
		body := "<html><body>502 Bad Gateway, but with a 200</body></html>"
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}},
	{"reset mid-stream", admit.Reset, func(c net.Conn, stop <-chan struct{}) {
		if _, err := io.WriteString(c, hostileSSEHead+hostileChunk("Hello")+hostileChunk(" there")); err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // the server's pace
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST, not FIN
		}
		c.Close()
	}},
	{"accepts and never answers", admit.Timeout, func(c net.Conn, stop <-chan struct{}) {
		<-stop
	}},
	// Issue 12, case 1, and the class behind it: whatever the status,
	// the attempt ends by its hard timeout with a true elapsed.
	{"101 switching protocols held open", admit.ServerError, func(c net.Conn, stop <-chan struct{}) {
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		<-stop
	}},
	{"101 switching protocols closed after 5 s", admit.ServerError, func(c net.Conn, stop <-chan struct{}) {
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		select {
		case <-stop:
		case <-time.After(5 * time.Second): // the server's pace
		}
	}},
	{"204 no content held open", admit.ServerError, func(c net.Conn, stop <-chan struct{}) {
		_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		<-stop
	}},
	{"302 with a body that never ends", admit.Timeout, func(c net.Conn, stop <-chan struct{}) {
		_, _ = io.WriteString(c, "HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Type: text/html\r\n\r\n")
		for !hostileStopped(stop) {
			if _, err := c.Write([]byte{'<'}); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond) // the server's pace
		}
	}},
	{"500 headers and no body", admit.Timeout, func(c net.Conn, stop <-chan struct{}) {
		_, _ = io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
		<-stop
	}},
	{"stream stalls mid-chunk", admit.Timeout, func(c net.Conn, stop <-chan struct{}) {
		ev := hostileChunk("half")
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n400\r\ndata: {\"choi", len(ev), ev)
		<-stop
	}},
	{"huge chunk-size line", admit.ServerError, func(c net.Conn, stop <-chan struct{}) {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		hostileFill(c, stop, nil, 1<<20)
		<-stop
	}},
	{"gzip bomb not asked for", admit.ServerError, func(c net.Conn, stop <-chan struct{}) {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n\r\n\x1f\x8b\x08\x00")
		hostileFill(c, stop, nil, 1<<30)
	}},
}

// hostileFill writes prefix and then filler up to n bytes, or until the
// client goes away.
func hostileFill(c net.Conn, stop <-chan struct{}, prefix []byte, n int64) {
	if _, err := c.Write(prefix); err != nil {
		return
	}
	n -= int64(len(prefix))
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	for n > 0 && !hostileStopped(stop) {
		w := chunk[:min(int64(len(chunk)), n)]
		if _, err := c.Write(w); err != nil {
			return
		}
		n -= int64(len(w))
	}
}

// hostileConfig is a config with one openai seat, x, at addr.
func hostileConfig(t *testing.T, dir, baseURL string) {
	t.Helper()
	cfg := fmt.Sprintf(`budget: {deadline: 30s, token_ceiling: 1000000000, max_attempts: 1, max_wait: 5s}
timeouts: {soft: 500ms, hard: %s}
seats:
  x: {kind: openai, base_url: %q, model: gpt-4o-mini, api_key_env: HOSTILE_TEST_KEY}
fallback: [x]
`, hostileHard, baseURL)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(cfg), 0o644))
}

// hostileResult is one finished process.
type hostileResult struct {
	code int
	wall time.Duration
	// peakRSSKiB is the process's own high-water RSS (VmHWM, sampled from
	// /proc while it runs: a high-water mark, so the last sample holds the
	// peak). rusageKiB is wait4's Maxrss, which is only an upper bound:
	// os/exec starts children with vfork, and Linux counts the parent's
	// RSS at the exec into the child's Maxrss.
	peakRSSKiB     int64
	rssBound       bool // peakRSSKiB is rusage's upper bound, not a sample
	rusageKiB      int64
	stdout, stderr string
}

// hostileVmHWM reads a live process's peak RSS in KiB (0 when gone).
func hostileVmHWM(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kib)
			return kib
		}
	}
	return 0
}

func hostileRun(t *testing.T, bin, dir string, env []string, args ...string) hostileResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	require.NoError(t, cmd.Start())
	// Not a clock: a bound, so a hang fails the test instead of the run.
	killer := time.AfterFunc(realtime.By(30*time.Second), func() { _ = cmd.Process.Kill() })
	defer killer.Stop()
	var peak atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			if kib := hostileVmHWM(cmd.Process.Pid); kib > peak.Load() {
				peak.Store(kib)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	<-sampled
	res := hostileResult{wall: time.Since(start), stdout: stdout.String(), stderr: stderr.String(), peakRSSKiB: peak.Load()}
	if err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "stderr: %s", res.stderr)
	}
	res.code = cmd.ProcessState.ExitCode()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.rusageKiB = ru.Maxrss // KiB on Linux
	}
	if res.peakRSSKiB == 0 {
		// Exited before a sample: Maxrss is only an upper bound (it holds
		// the parent's RSS at the exec), so it is shown, never judged.
		res.peakRSSKiB, res.rssBound = res.rusageKiB, true
	}
	return res
}

// hostileEnded asserts how an attempt and its process ended, by the
// tool's own numbers: an attempt cut by the hard timeout says elapsed at
// least the hard timeout (never early: the cut is that clock's, not an
// earlier one's); every attempt, and the process around it, ends by a
// ceiling only a hang reaches (realtime: how late a loaded machine runs
// the timer is noise, not a defect, so no tighter bound is asserted).
func hostileEnded(t *testing.T, outcome admit.Outcome, elapsed, wall time.Duration) {
	t.Helper()
	if outcome == admit.Timeout {
		// 10 ms: the deadline is set a moment before the stopwatch starts,
		// and elapsed_s is rounded to the millisecond.
		assert.GreaterOrEqual(t, elapsed, hostileHard-10*time.Millisecond, "a hard-timeout cut's elapsed_s is the hard timeout's")
	}
	assert.LessOrEqual(t, elapsed, realtime.By(hostileHard), "elapsed_s: the attempt ended by its hard timeout")
	assert.Less(t, wall, realtime.By(hostileHard+hostileStartup), "the process exited after its attempt, start-up included")
}

// TestHostileSeats runs the whole CLI against servers that misbehave:
// every attempt ends by its hard timeout (the row's elapsed_s says so),
// the process exits after it and stays under 100 MB, and the log gets
// one row with the right outcome. A stress test (RETRYGATE_STRESS=1):
// each case waits out a real hard timeout in a real process.
func TestHostileSeats(t *testing.T) {
	stressTest(t)
	bin := retrygateBinary(t)
	type figure struct {
		name       string
		outcome    admit.Outcome
		elapsed    time.Duration
		wall       time.Duration
		rssKiB     int64
		rusageKiB  int64
		overrunRow time.Duration
	}
	var figures []figure
	for _, tc := range hostileCases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_")+"/time", func(t *testing.T) {
			addr := hostileServer(t, tc.serve)
			dir := t.TempDir()
			hostileConfig(t, dir, "http://"+addr+"/v1")
			res := hostileRun(t, bin, dir, []string{"HOSTILE_TEST_KEY=sk-hostile-test"}, "time", "--seat", "x", "--json")
			assert.Equal(t, ExitOK, res.code, "a seat failing is data, not an error; stderr: %s", res.stderr)
			var got struct {
				Outcome  admit.Outcome `json:"outcome"`
				ElapsedS float64       `json:"elapsed_s"`
				Note     string        `json:"note"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &got), "stdout: %s", res.stdout)
			assert.Equal(t, tc.outcome, got.Outcome, "outcome (note %q)", got.Note)
			hostileEnded(t, tc.outcome, time.Duration(got.ElapsedS*float64(time.Second)), res.wall)
			t.Logf("time %-36s outcome=%-12s elapsed_s=%.3f process_wall=%.3fs peak_rss=%.1f MiB", tc.name, got.Outcome, got.ElapsedS, res.wall.Seconds(), float64(res.peakRSSKiB)/1024)
		})
		t.Run(strings.ReplaceAll(tc.name, " ", "_")+"/rehearse", func(t *testing.T) {
			addr := hostileServer(t, tc.serve)
			dir := t.TempDir()
			hostileConfig(t, dir, "http://"+addr+"/v1")
			res := hostileRun(t, bin, dir, []string{"HOSTILE_TEST_KEY=sk-hostile-test"}, "rehearse", "--seat", "x", "--jobs", "1", "--seed", "7")
			assert.Equal(t, ExitOK, res.code, "a seat failing is data, not an error; stderr: %s", res.stderr)
			for _, bad := range []string{"panic", "goroutine ", "internal error"} {
				assert.NotContains(t, res.stderr, bad)
			}
			rows, rd, err := ledgerfile.ReadFile(filepath.Join(dir, "rehearsal.log"))
			require.NoError(t, err, "the log reads strictly")
			assert.Empty(t, rd.Torn())
			// One attempt sent; the job's last row may be the gate's refusal
			// of a second (max_attempts 1), never sent.
			var sent []ledgerfile.Row
			for _, r := range rows {
				if !r.Unsent {
					sent = append(sent, r)
				}
			}
			require.Len(t, sent, 1, "one attempt sent")
			r := sent[0]
			figures = append(figures, figure{tc.name, r.Outcome, r.Elapsed, res.wall, res.peakRSSKiB, res.rusageKiB, r.Elapsed - hostileHard})
			assert.Equal(t, tc.outcome, r.Outcome, "outcome (note %q)", r.Note)
			assert.NotEmpty(t, rows[len(rows)-1].JobEnd, "the job's last row says how it ended")
			hostileEnded(t, tc.outcome, r.Elapsed, res.wall)
			if !res.rssBound {
				assert.Less(t, res.peakRSSKiB, int64(hostileMaxRSS), "peak RSS under 100 MB")
			}
		})
	}
	var worstOver time.Duration
	var worstRSS int64
	for _, f := range figures {
		t.Logf("%-26s outcome=%-12s elapsed_s=%.3f overrun_vs_hard=%+.3fs process_wall=%.3fs peak_rss=%.1f MiB (rusage Maxrss %.1f MiB)",
			f.name, f.outcome, f.elapsed.Seconds(), f.overrunRow.Seconds(), f.wall.Seconds(), float64(f.rssKiB)/1024, float64(f.rusageKiB)/1024)
		worstOver = max(worstOver, f.overrunRow)
		worstRSS = max(worstRSS, f.rssKiB)
	}
	t.Logf("worst elapsed_s overrun past the hard timeout: %+.3fs; worst peak RSS: %.1f MiB", worstOver.Seconds(), float64(worstRSS)/1024)
}
