package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var okProxyPlan = proxyPlans{{TTFB: 5 * time.Millisecond, Wait: 10 * time.Millisecond, Elapsed: 20 * time.Millisecond, CompletionTokens: 5}}

// freeAddr is a loopback address nothing listens on now, the test's
// own until it ends (reservePort).
func freeAddr(t *testing.T) string {
	t.Helper()
	port, release, err := reservePort()
	require.NoError(t, err)
	t.Cleanup(release)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// scrape is a metric's value in the proxy's /metrics (summed over its
// series; a reason's series alone when reason is given).
func scrape(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	total := 0.0
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err)
		total += v
	}
	return total
}

// readyz is /readyz's status and body; the probe is given 3 s.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	require.NoError(t, err, "/readyz answers within its own timeout")
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The log removed under a running proxy: the next rows go to a new file
// at its path, headed by a `# event log what=reopened` line, never to the
// removed one; a FIFO put at the path keeps /readyz answering (503) and
// the rows wait in memory until a file can be made there again; a
// directory there until the proxy stops loses the rows it held, and the
// last line says so (exit 1). rows_total + rows_lost_total is every
// request answered.
func TestProxyLogRemovedUnderIt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := retrygateBinary(t)
	_, addr := servePlans(t, okProxyPlan)
	dir := t.TempDir()
	cfg := fmt.Sprintf("seats:\n  up: {kind: openai, base_url: \"http://%s/v1\", model: m}\nfallback: [up]\n", addr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(cfg), 0o644))
	maddr := freeAddr(t)
	cmd, stderr, base := startProxyIn(t, bin, dir, "--metrics", maddr)
	log := filepath.Join(dir, "rehearsal.log")
	answered := 0
	ask := func() {
		t.Helper()
		chatOK(t, base)
		answered++
	}
	settled := func(rows float64) {
		t.Helper()
		require.Eventually(t, func() bool {
			return scrape(t, maddr, "retrygate_log_rows_total")+scrape(t, maddr, "retrygate_log_rows_lost_total") == rows
		}, 10*time.Second, 5*time.Millisecond)
	}
	held := func(n float64) {
		t.Helper()
		require.Eventually(t, func() bool { return scrape(t, maddr, "retrygate_log_rows_held") == n }, 10*time.Second, 5*time.Millisecond)
	}

	ask()
	settled(1)
	require.NoError(t, os.Remove(log))
	ask()
	ask()
	settled(3)
	data, err := os.ReadFile(log)
	require.NoError(t, err, "the rows made the log again at its path")
	assert.Regexp(t, `^# retrygate rehearsal log v1\n# event log what=reopened reason=removed ts=\S+\n`, string(data))
	assert.Equal(t, 2, strings.Count(string(data), " job=p1-"), "the two rows after the removal")
	assert.Equal(t, 1.0, scrape(t, maddr, "retrygate_log_reopens_total"))
	code, _ := readyz(t, maddr)
	assert.Equal(t, 200, code)

	// A FIFO at the path: nothing waits on it.
	require.NoError(t, os.Remove(log))
	require.NoError(t, syscall.Mkfifo(log, 0o644))
	code, body := readyz(t, maddr)
	assert.Equal(t, 503, code)
	assert.Contains(t, body, "a FIFO, not a regular file")
	ask()
	held(1)
	code, body = readyz(t, maddr)
	assert.Equal(t, 503, code)
	assert.Contains(t, body, "1 rows wait for the log")
	require.NoError(t, os.Remove(log))
	ask()
	settled(5)
	held(0)
	code, _ = readyz(t, maddr)
	assert.Equal(t, 200, code)
	data, err = os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(data), " job=p1-"), "the held row and the next")

	// A directory at the path until the proxy stops: its held row is lost, and said so.
	require.NoError(t, os.Remove(log))
	require.NoError(t, os.Mkdir(log, 0o755))
	ask()
	held(1)
	written := scrape(t, maddr, "retrygate_log_rows_total")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "exit 1: %v\n%s", err, stderr.String())
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, stderr.String(), "retrygate: proxy stopped; 1 row never reached rehearsal.log (1 shutdown): every other row is in it")
	assert.Regexp(t, `(?m)^ts=\S+ job=p1-6 attempt=1 .*outcome=ok`, stderr.String(), "the lost sent attempt's row, on stderr")
	assert.NotContains(t, stderr.String(), "every row is in")
	assert.NotContains(t, stderr.String(), "takes rows again; the rows held for it are written\nretrygate: proxy stopped")
	assert.Equal(t, float64(answered), written+1)
}

// One proxy per file log: a second on the same log is refused at start
// (exit 2) naming the first's pid, and leaves the first serving; record
// still appends beside it. Once the first stops, another may start.
func TestProxySecondOnOneFileLog(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	pp := startProxyProcess(t, "", okProxyPlan)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, retrygateBinary(t), "proxy", "--listen", "127.0.0.1:0")
	second.Dir = pp.dir
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "%v\n%s", err, out)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Contains(t, string(out), fmt.Sprintf(`retrygate: proxy: log "rehearsal.log" is held by process %d (its lock "rehearsal.log.lock")`, pp.cmd.Process.Pid))
	assert.Contains(t, string(out), "retrygate: hint: stop that proxy")

	code, _ := pp.post("served", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, 200, code, "the first still serves")

	rec := exec.Command(retrygateBinary(t), "record", "--job", "by-hand", "--seat", "up", "--wait", "1", "--elapsed", "2", "--tokens", "10")
	rec.Dir = pp.dir
	out, err = rec.CombinedOutput()
	require.NoError(t, err, "record appends beside the proxy: %s", out)

	require.NoError(t, pp.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, pp.cmd.Wait(), pp.stderr.String())
	_, err = os.Stat(filepath.Join(pp.dir, "rehearsal.log.lock"))
	assert.True(t, os.IsNotExist(err), "the lock file goes with its proxy")
	data, err := os.ReadFile(filepath.Join(pp.dir, "rehearsal.log"))
	require.NoError(t, err)
	assert.Contains(t, string(data), "job=served attempt=1")
	assert.Contains(t, string(data), "job=by-hand attempt=1")

	again, _, _ := startProxyIn(t, retrygateBinary(t), pp.dir)
	require.NoError(t, again.Process.Signal(syscall.SIGTERM))
	require.NoError(t, again.Wait())
}

// A full disk, for real: the log on a 64 KiB tmpfs (root only) that a
// filler file fills. While it is full the proxy answers, its rows wait
// (rows_held, /readyz 503 naming the error); once the filler goes, the
// next request's write takes them all, the proxy is ready again, and
// the log holds one row per answer: rows_total + rows_lost_total is
// every request answered.
func TestProxyFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounts a tmpfs: root only (the injected ENOSPC of rehearse/proxy's TestFullDiskRowsResume runs everywhere)")
	}
	disk := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", disk).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", disk).Run() })

	bin := retrygateBinary(t)
	_, addr := servePlans(t, okProxyPlan)
	dir := t.TempDir()
	cfg := fmt.Sprintf("seats:\n  up: {kind: openai, base_url: \"http://%s/v1\", model: m}\nfallback: [up]\n", addr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(cfg), 0o644))
	log := filepath.Join(disk, "rehearsal.log")
	maddr := freeAddr(t)
	cmd, stderr, base := startProxyIn(t, bin, dir, "--metrics", maddr, "--log", log)
	answered := 0
	ask := func() {
		t.Helper()
		chatOK(t, base)
		answered++
	}
	ask()

	// Fill the disk.
	filler, err := os.Create(filepath.Join(disk, "filler"))
	require.NoError(t, err)
	chunk := make([]byte, 4096)
	for {
		if _, err := filler.Write(chunk); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
	}
	require.NoError(t, filler.Close())
	// The log's last page may have room for a row or two more.
	for range 40 {
		ask()
		if scrape(t, maddr, "retrygate_log_rows_held") > 0 {
			break
		}
	}
	require.Eventually(t, func() bool { return scrape(t, maddr, "retrygate_log_rows_held") > 0 }, 10*time.Second, 5*time.Millisecond, "rows wait while the disk is full")
	ask()
	code, body := readyz(t, maddr)
	assert.Equal(t, 503, code)
	assert.Contains(t, body, "no space left on device")

	require.NoError(t, os.Remove(filepath.Join(disk, "filler")))
	ask()
	require.Eventually(t, func() bool {
		return scrape(t, maddr, "retrygate_log_rows_total") == float64(answered) && scrape(t, maddr, "retrygate_log_rows_held") == 0
	}, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, 0.0, scrape(t, maddr, "retrygate_log_rows_lost_total"))
	code, _ = readyz(t, maddr)
	assert.Equal(t, 200, code)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), stderr.String())
	assert.Contains(t, stderr.String(), "no space left on device (answers still go out; their rows wait in memory")
	assert.Contains(t, stderr.String(), "takes rows again; the rows held for it are written")
	assert.Contains(t, stderr.String(), "proxy stopped; every row is in "+log)
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, answered, strings.Count(string(data), " job=p1-"), "one row per answer, none twice")
}

// chatOK sends one chat request through the proxy at base and requires
// its 200.
func chatOK(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Post(base+"/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
}
