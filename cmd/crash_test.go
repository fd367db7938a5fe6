package cmd

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
)

// crashScript is a seat with small real delays and some failures.
const crashScript = `name: crash
model: scratch
steps:
  - {ttfb: 20ms, wait: 40ms, elapsed: 120ms, prompt_tokens: 50, completion_tokens: 20}
  - {status: 503, elapsed: 30ms}
  - {wait: 30ms, elapsed: 200ms, reset_after: 100ms, prompt_tokens: 50, completion_tokens: 40}
  - {status: 429, error: rate_limit_exceeded, retry_after: 100ms, elapsed: 20ms}
  - {ttfb: 10ms, wait: 60ms, elapsed: 150ms, prompt_tokens: 50, completion_tokens: 30}
`

// crashServer is a running `retrygate seat serve` process.
type crashServer struct {
	cmd    *exec.Cmd
	base   string
	mu     sync.Mutex
	stderr bytes.Buffer
	stdout bytes.Buffer
	done   chan struct{}
}

func (s *crashServer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.Write(p)
}

// crashStartServe starts `retrygate seat serve` on 127.0.0.1 with the
// script at path and returns once it printed its base URL. It is stopped
// (Ctrl-C) when the test ends, if stop was not called first.
func crashStartServe(t *testing.T, bin, path string, extra ...string) *crashServer {
	t.Helper()
	s := &crashServer{done: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{"seat", "serve", "--script", path, "--addr", "127.0.0.1:0"}, extra...)...)
	s.cmd.Stderr = s
	out, err := s.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, s.cmd.Start())
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		line, _ := br.ReadString('\n')
		lines <- line
		s.mu.Lock()
		s.stdout.WriteString(line)
		s.mu.Unlock()
		rest, _ := io.ReadAll(br)
		s.mu.Lock()
		s.stdout.Write(rest)
		s.mu.Unlock()
	}()
	select {
	case line := <-lines:
		s.base = strings.TrimSpace(line)
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Fatalf("seat serve printed no base URL within 10s; stderr: %s", s.errText())
	}
	require.True(t, strings.HasPrefix(s.base, "http://127.0.0.1:"), "base URL on stdout's first line: %q (stderr %s)", s.base, s.errText())
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *crashServer) errText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

func (s *crashServer) outText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stdout.String()
}

// stop sends Ctrl-C and waits for the server to exit.
func (s *crashServer) stop(t *testing.T) {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("seat serve did not stop within 10s of Ctrl-C")
	}
}

// crashLines splits a log into lines; the last one may lack its newline.
func crashLines(data []byte) []string {
	s := string(data)
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// crashCheck proves the log at path is still whole after a kill: it only
// grew (before is a prefix), it reads strictly, every torn line is either
// marked by the next writer or is the file's last line, and bytes
// appended after a torn tail start on a fresh line with the marker. It
// returns the log's bytes and whether its last line is torn now.
func crashCheck(t *testing.T, path string, before []byte) (after []byte, tornTail bool) {
	t.Helper()
	after, err := os.ReadFile(path)
	if os.IsNotExist(err) && len(before) == 0 {
		return nil, false
	}
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(after, before), "append only: the log's old bytes are untouched")
	_, rd, err := ledgerfile.ReadFile(path)
	require.NoError(t, err, "after a kill the log still reads strictly")
	lines := crashLines(after)
	tornTail = len(after) > 0 && after[len(after)-1] != '\n'
	lastTorn := false
	for _, le := range rd.Torn() {
		require.GreaterOrEqual(t, le.Line, 1)
		require.LessOrEqual(t, le.Line, len(lines))
		if le.Line == len(lines) {
			require.True(t, tornTail, "line %d reported torn, but it ends in a newline", le.Line)
			lastTorn = true
			continue
		}
		assert.Equal(t, ledgerfile.TornMarker, lines[le.Line], "torn line %d is followed by the marker", le.Line)
	}
	if tornTail {
		// A torn tail that is a whole comment (a "# run" line cut short)
		// is skipped as a comment; any other torn tail must be reported.
		if !strings.HasPrefix(strings.TrimSpace(lines[len(lines)-1]), "#") {
			assert.True(t, lastTorn, "the torn last line %d is reported by number", len(lines))
		}
	}
	appended := after[len(before):]
	marker := []byte("\n" + ledgerfile.TornMarker + "\n")
	if len(appended) > 0 && len(before) > 0 && before[len(before)-1] != '\n' {
		assert.True(t, bytes.HasPrefix(appended, marker), "the append after a torn tail starts on a fresh line with the marker, not glued to the tail: %q", crashHead(appended))
	} else if len(appended) > 0 {
		assert.False(t, bytes.HasPrefix(appended, marker), "no marker without a torn tail")
	}
	return after, tornTail
}

func crashHead(b []byte) []byte {
	if len(b) > 120 {
		return b[:120]
	}
	return b
}

// crashConfig writes a config with one openai seat, served, at base.
func crashConfig(t *testing.T, dir, base string) {
	t.Helper()
	cfg := fmt.Sprintf(`budget: {deadline: 10s, token_ceiling: 100000, max_attempts: 3, max_wait: 2s}
retry: {base_delay: 20ms, max_delay: 100ms}
timeouts: {soft: 500ms, hard: 1s}
breaker: {failure_rate: 0}
seats:
  served: {kind: openai, base_url: %q, model: gpt-4o-mini}
fallback: [served]
`, base)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(cfg), 0o644))
}

// TestCrashRehearseSIGKILL kills `retrygate rehearse` against `retrygate
// seat serve` with SIGKILL at seeded random moments, 50 times, every run
// appending to one log: after each kill the log reads strictly, at most
// its last line is torn, and the next run starts on a fresh line. A
// stress test (RETRYGATE_STRESS=1).
func TestCrashRehearseSIGKILL(t *testing.T) {
	stressTest(t)
	bin := retrygateBinary(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "crash.yaml")
	require.NoError(t, os.WriteFile(script, []byte(crashScript), 0o644))
	srv := crashStartServe(t, bin, script)
	crashConfig(t, dir, srv.base)
	log := filepath.Join(dir, "rehearsal.log")
	rng := rand.New(rand.NewPCG(7, 50))
	const kills = 50
	var before []byte
	var killed, noBytes, tornTails, beforeRun int
	var killedAt []time.Duration
	for i := 0; i < kills; i++ {
		// Killed between 0 and 600 ms after start: some before the first
		// byte, most mid-run with four jobs' attempts in flight.
		after := time.Duration(rng.Int64N(int64(600 * time.Millisecond)))
		cmd := exec.Command(bin, "rehearse", "--jobs", "100000", "--concurrency", "4")
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		require.NoError(t, cmd.Start())
		timer := time.AfterFunc(after, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		err := cmd.Wait()
		timer.Stop()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			killed++
		} else {
			t.Errorf("run %d was not killed: %v", i, err)
		}
		killedAt = append(killedAt, after)
		data, torn := crashCheck(t, log, before)
		if len(data) == len(before) {
			noBytes++
		}
		if len(before) == 0 && len(data) > 0 {
			beforeRun = i
		}
		if torn {
			tornTails++
		}
		before = data
	}
	// One more run that finishes: it appends after whatever the last kill left.
	cmd := exec.Command(bin, "rehearse", "--jobs", "3")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	final, torn := crashCheck(t, log, before)
	assert.False(t, torn, "a finished run leaves no torn tail")
	rows, rd, err := ledgerfile.ReadFile(log)
	require.NoError(t, err)
	runs := strings.Count(string(final), "\n# run r")
	if bytes.HasPrefix(final, []byte("# run r")) {
		runs++
	}
	srv.stop(t)
	assert.NotContains(t, srv.errText(), "panic")
	t.Logf("kills: %d of %d (first bytes written on run %d); runs that wrote nothing before the kill: %d; torn last lines seen: %d; torn lines in the final log: %d; rows read: %d; runs logged: %d; log %d bytes",
		killed, kills, beforeRun, noBytes, tornTails, len(rd.Torn()), len(rows), runs, len(final))
}

// TestCrashRecordTornTail kills `retrygate record` processes mid-write in
// a tight loop, with rows as long as a note may be (ledgerfile.MaxValue),
// to make a torn tail happen for real; then every next append must start on
// a fresh line, and the log reads strictly after every kill (crashCheck).
// A single write(2) rarely tears, so a torn tail itself is not required
// (the planted tail below proves that path); what is required is that the
// loop did what it says: processes were killed before their write, and
// others after it, so kills landed on both sides of the one write. A
// stress test (RETRYGATE_STRESS=1).
func TestCrashRecordTornTail(t *testing.T) {
	stressTest(t)
	bin := retrygateBinary(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "rehearsal.log")
	note := strings.Repeat("n", ledgerfile.MaxValue)
	rec := func(i int) *exec.Cmd {
		c := exec.Command(bin, "record", "--job", fmt.Sprintf("k%d", i), "--wait", "1", "--elapsed", "2", "--tokens", "10", "--note", note, "--log", log)
		c.Stdout, c.Stderr = io.Discard, io.Discard
		return c
	}
	// Calibrate: how long a record process takes here, start to exit.
	var total time.Duration
	const calib = 5
	for i := 0; i < calib; i++ {
		start := time.Now()
		require.NoError(t, rec(-i-1).Run())
		total += time.Since(start)
	}
	typical := total / calib
	before, err := os.ReadFile(log)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(11, 128))
	deadline := time.Now().Add(8 * time.Second) // a bound on the loop, not a clock
	var kills, torn, whole, none int
	for i := 0; i < 400 && time.Now().Before(deadline); i++ {
		// Near the end of the process's life, where its one write is; the
		// estimate follows the runs that finished, as the log grows.
		at := typical*7/10 + time.Duration(rng.Int64N(int64(typical*4/10)))
		c := rec(i)
		start := time.Now()
		require.NoError(t, c.Start())
		timer := time.AfterFunc(at, func() { _ = c.Process.Signal(syscall.SIGKILL) })
		_ = c.Wait()
		took := time.Since(start)
		timer.Stop()
		if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			kills++
		} else {
			typical = (3*typical + took) / 4
		}
		data, isTorn := crashCheck(t, log, before)
		switch {
		case isTorn:
			torn++
		case len(data) > len(before):
			whole++
		default:
			none++
		}
		before = data
	}
	t.Logf("record processes killed: %d (typical run %s at the end); torn tails observed: %d; whole rows (the kill came after the write, or never): %d; nothing written: %d",
		kills, typical.Round(time.Millisecond), torn, whole, none)
	assert.Positive(t, kills, "no record process was killed: the loop tested no crash")
	assert.Positive(t, none, "no kill came before the write: the kills missed the process's life")
	assert.Positive(t, torn+whole, "every kill came before the write: none reached it")
}

// TestCrashTornTailPlanted plants a torn last line by hand: the strict
// reader reports it by number and reads every other row; the next append,
// by record and by rehearse, starts on a fresh line with the marker.
func TestCrashTornTailPlanted(t *testing.T) {
	bin := retrygateBinary(t)
	for _, writer := range []string{"record", "rehearse"} {
		t.Run(writer, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "rehearsal.log")
			for i := 0; i < 2; i++ {
				out, err := exec.Command(bin, "record", "--job", "p", "--wait", "1", "--elapsed", "2", "--tokens", "10", "--max-attempts", "5", "--log", log).CombinedOutput()
				require.NoError(t, err, string(out))
			}
			whole, err := os.ReadFile(log)
			require.NoError(t, err)
			// Half of a third row, as a writer killed mid-write leaves it.
			third := "ts=2026-03-14T09:00:00Z job=p attempt=3 wait_s=1.000 elapsed_s=2.000 tokens=10 outcome=ok decision=admit"
			planted := append(append([]byte{}, whole...), third[:len(third)/2]...)
			require.NoError(t, os.WriteFile(log, planted, 0o644))
			tornLine := len(crashLines(planted))

			rows, rd, err := ledgerfile.ReadFile(log)
			require.NoError(t, err, "a torn tail is not a malformed line")
			assert.Len(t, rows, 2)
			require.Len(t, rd.Torn(), 1)
			assert.Equal(t, tornLine, rd.Torn()[0].Line, "the reader names the torn line by number")
			assert.ErrorIs(t, rd.Torn()[0], ledgerfile.ErrTorn)

			var cmd *exec.Cmd
			if writer == "record" {
				cmd = exec.Command(bin, "record", "--job", "p", "--wait", "1", "--elapsed", "2", "--tokens", "10", "--max-attempts", "5", "--log", log)
			} else {
				cmd = exec.Command(bin, "rehearse", "--log", log) // the built-in demo
			}
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, string(out))
			after, stillTorn := crashCheck(t, log, planted)
			assert.False(t, stillTorn)
			require.True(t, bytes.HasPrefix(after[len(planted):], []byte("\n"+ledgerfile.TornMarker+"\n")),
				"the next append starts on a fresh line: %q", crashHead(after[len(planted):]))
			rows, rd, err = ledgerfile.ReadFile(log)
			require.NoError(t, err)
			require.Len(t, rd.Torn(), 1)
			assert.Equal(t, tornLine, rd.Torn()[0].Line, "still the same line, by number")
			if writer == "record" {
				require.Len(t, rows, 3)
				assert.Equal(t, 3, rows[2].Attempt, "the torn row is not counted: the next attempt is 3")
			} else {
				assert.Greater(t, len(rows), 2)
			}
		})
	}
}

// TestCrashTornLineNumberAfterMarker: once the next writer has marked a
// torn line, the reader must still name it by its number. A torn half
// row rarely parses (its required keys are cut off), and the reader must
// not lose the number with the parse.
func TestCrashTornLineNumberAfterMarker(t *testing.T) {
	row := "ts=2026-03-14T09:00:00Z job=p attempt=1 wait_s=1.000 elapsed_s=2.000 tokens=10 outcome=ok decision=admit\n"
	next := "ts=2026-03-14T09:00:05Z job=p attempt=2 wait_s=1.000 elapsed_s=2.000 tokens=10 outcome=ok decision=admit\n"
	for _, cut := range []struct {
		name, tail string
	}{
		{"parses", "ts=2026-03-14T09:00:03Z job=q attempt=1 wait_s=1.000 elapsed_s=2.000 tokens=1"}, // tokens=1 of 10
		{"does not parse", "ts=2026-03-14T09:00:03Z job=q attempt=1 wait_s=1.0"},                    // no elapsed_s, no tokens
		{"cut inside a quote", `ts=2026-03-14T09:00:03Z job=q wait_s=1 elapsed_s=2 tokens=3 note="half`},
	} {
		t.Run(strings.ReplaceAll(cut.name, " ", "_"), func(t *testing.T) {
			log := ledgerfile.Header + "\n" + row + cut.tail + "\n" + ledgerfile.TornMarker + "\n" + next
			rows, rd, err := ledgerfile.ReadAll(strings.NewReader(log), "rehearsal.log")
			require.NoError(t, err)
			assert.Len(t, rows, 2, "the torn row is dropped, the rows around it kept")
			require.Len(t, rd.Torn(), 1)
			assert.Equal(t, 3, rd.Torn()[0].Line, "the torn line is line 3")
			assert.Contains(t, rd.Torn()[0].Error(), "line 3:")
		})
	}
}

// FuzzCrashCutAnywhere is a crash at every possible byte: a log of
// whole rows is cut at an arbitrary offset (what a writer killed
// mid-write leaves), the next writer appends, and the log must read
// strictly: every row whole before the cut kept, the cut line (if any)
// reported torn by its number, the new row read, nothing malformed.
func FuzzCrashCutAnywhere(f *testing.F) {
	f.Add(uint16(0), "note")
	f.Add(uint16(40), "")
	f.Add(uint16(200), "café ünïcode")
	f.Add(uint16(333), `quote " and \ backslash`)
	f.Add(uint16(65535), "x")
	f.Fuzz(func(t *testing.T, cut uint16, note string) {
		if strings.ContainsAny(note, "\r\n") || len(note) > 300 {
			return // the CLI refuses these before a row is made
		}
		note = strings.ToValidUTF8(note, "?")
		path := filepath.Join(t.TempDir(), "rehearsal.log")
		w := ledgerfile.NewWriter(path, false)
		t0 := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
		row := func(i int) ledgerfile.Row {
			return ledgerfile.Row{TS: t0.Add(time.Duration(i) * time.Second), Job: "j", Attempt: i + 1, Seat: "s",
				Wait: time.Second, Elapsed: 2 * time.Second, Tokens: 10, Decision: "admit", Note: note}
		}
		for i := 0; i < 3; i++ {
			require.NoError(t, w.Append(row(i)))
		}
		require.NoError(t, w.Close())
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		at := int(cut) % (len(data) + 1)
		require.NoError(t, os.Truncate(path, int64(at)))
		kept := data[:at]
		whole := 0 // rows whose newline survived the cut
		for _, l := range crashLines(kept[:bytes.LastIndexByte(kept, '\n')+1]) {
			if !strings.HasPrefix(l, "#") {
				whole++
			}
		}
		w = ledgerfile.NewWriter(path, false)
		require.NoError(t, w.Append(row(whole)))
		require.NoError(t, w.Close())
		after, err := os.ReadFile(path)
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(after, kept), "append only")
		rows, rd, err := ledgerfile.ReadFile(path)
		require.NoError(t, err, "the log reads strictly after a cut at byte %d", at)
		require.Len(t, rows, whole+1)
		assert.Equal(t, whole+1, rows[whole].Attempt)
		tail := kept[bytes.LastIndexByte(kept, '\n')+1:]
		if len(tail) > 0 && !bytes.HasPrefix(bytes.TrimSpace(tail), []byte("#")) {
			require.Len(t, rd.Torn(), 1, "the cut line is torn")
			assert.Equal(t, len(crashLines(kept)), rd.Torn()[0].Line, "and named by its number")
			assert.True(t, bytes.HasPrefix(after[at:], []byte("\n"+ledgerfile.TornMarker+"\n")), "the append starts on a fresh line")
		} else {
			assert.Empty(t, rd.Torn())
		}
	})
}
