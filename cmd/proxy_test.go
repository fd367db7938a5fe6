package cmd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore/pgtest"
	"github.com/retrygate/retrygate/rehearse/proxy"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
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

	assert.Equal(t, proxy.DefaultMaxJobs, o.MaxJobs)
	assert.Zero(t, o.MaxClientJobs, "a quarter of --max-jobs, as the proxy makes it")
	assert.Equal(t, proxy.DefaultRetention, o.Retention)
	assert.False(t, o.PassUnknown)
	o, err = proxyOptions(t, proxyConfig, "--max-jobs", "1000", "--max-client-jobs", "10", "--job-retention", "90s", "--pass-unknown")
	require.NoError(t, err)
	assert.Equal(t, 1000, o.MaxJobs)
	assert.Equal(t, 10, o.MaxClientJobs)
	assert.Equal(t, 90*time.Second, o.Retention)
	assert.True(t, o.PassUnknown)
	_, err = proxyOptions(t, proxyConfig, "--max-jobs", "10", "--max-client-jobs", "11")
	assert.ErrorContains(t, err, "--max-client-jobs: must be between 1 and --max-jobs (10), got 11")

	// A client's share: a quarter of the slots unless set; a client is
	// an IPv4 /32 and an IPv6 /64 unless set.
	assert.Zero(t, o.MaxClientConcurrent, "a quarter of --max-concurrent, as the proxy makes it")
	assert.Equal(t, []int{32, 64}, []int{o.ClientPrefixV4, o.ClientPrefixV6})
	o, err = proxyOptions(t, proxyConfig, "--max-concurrent", "100", "--max-client-concurrent", "100", "--client-prefix-v4", "24", "--client-prefix-v6", "56")
	require.NoError(t, err)
	assert.Equal(t, []int{100, 24, 56}, []int{o.MaxClientConcurrent, o.ClientPrefixV4, o.ClientPrefixV6})
	_, err = proxyOptions(t, proxyConfig, "--max-concurrent", "10", "--max-client-concurrent", "11")
	assert.ErrorContains(t, err, "--max-client-concurrent: must be between 1 and --max-concurrent (10), got 11")
	_, err = proxyOptions(t, proxyConfig, "--client-prefix-v6", "129")
	assert.ErrorContains(t, err, "--client-prefix-v6: must be between 1 and 128 bits, got 129")

	// Off loopback only when --listen names it, and then it is flagged.
	o, err = proxyOptions(t, proxyConfig, "--listen", "0.0.0.0:6557")
	require.NoError(t, err)
	assert.True(t, o.Remote)

	// The limits: defaults, a --max-body past the default budget raises
	// it, and one past a --max-body-total given is refused.
	o, err = proxyOptions(t, proxyConfig)
	require.NoError(t, err)
	assert.Equal(t, []int64{proxy.DefaultMaxBody, proxy.DefaultMaxBodyTotal}, []int64{o.MaxBody, o.MaxBodyTotal})
	assert.Equal(t, []int{proxy.DefaultMaxConcurrent, proxy.DefaultMaxConns}, []int{o.MaxConcurrent, o.MaxConns})
	o, err = proxyOptions(t, proxyConfig, "--max-body", "200000000", "--max-conns", "10")
	require.NoError(t, err)
	assert.Equal(t, []int64{200000000, 200000000}, []int64{o.MaxBody, o.MaxBodyTotal})
	assert.Equal(t, 10, o.MaxConns)
	_, err = proxyOptions(t, proxyConfig, "--max-body", "2000", "--max-body-total", "1000")
	assert.ErrorContains(t, err, "--max-body: 2000 bytes is over --max-body-total (1000)")
}

type proxyPlans []seat.Plan

func (p proxyPlans) PlanFor(n int) seat.Plan { return p[min(n, len(p)-1)] }

// SIGTERM drains the real process: a request in flight runs to its end,
// its retry included (a 500, the backoff, then the stream), the process
// exits 0, and every row is in the log.
func TestProxySIGTERMDrains(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	pp := startProxyProcess(t, "retry: {base_delay: 10ms, max_delay: 50ms}\n", proxyPlans{
		{Status: 500, Elapsed: 5 * time.Millisecond},
		{TTFB: 5 * time.Millisecond, Wait: 50 * time.Millisecond, Elapsed: 600 * time.Millisecond, CompletionTokens: 10},
	})
	srv, cmd, stderr, dir, postTo := pp.srv, pp.cmd, pp.stderr, pp.dir, pp.post
	done := make(chan string, 1)
	go func() {
		_, b := postTo("streaming", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		done <- b
	}()
	require.Eventually(t, func() bool { return len(srv.Requests()) == 2 }, 5*time.Second, time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	assert.Contains(t, <-done, "[DONE]", "the request in flight finished")
	require.NoError(t, cmd.Wait(), stderr.String())
	assert.Contains(t, stderr.String(), "proxy stopped; every row is in rehearsal.log")

	log, err := os.ReadFile(filepath.Join(dir, "rehearsal.log"))
	require.NoError(t, err)
	assert.Regexp(t, `job=streaming attempt=1 .*outcome=server_error .*decision=admit`, string(log))
	assert.Regexp(t, `job=streaming attempt=2 .*outcome=ok .*decision=admit`, string(log))
}

// Two proxy processes on one PostgreSQL log share one budget per job:
// the job's two attempts go one through each, and its third request is
// refused by either, 503 attempt cap; both stop cleanly, and the log
// holds the job's rows from both.
func TestProxySharedBudgetPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	u := pgtest.DB(t)
	_, err := pgstore.Init(context.Background(), u)
	require.NoError(t, err)
	bin := retrygateBinary(t)
	srv, addr := servePlans(t, proxyPlans{
		{TTFB: 5 * time.Millisecond, Wait: 10 * time.Millisecond, Elapsed: 20 * time.Millisecond, CompletionTokens: 5},
	})

	dir := t.TempDir()
	cfg := fmt.Sprintf("budget: {deadline: 30s, max_attempts: 2}\nseats:\n  up: {kind: openai, base_url: \"http://%s/v1\", model: m}\nfallback: [up]\n", addr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(cfg), 0o644))
	var procs []*exec.Cmd
	var bases []string
	var errs []*bytes.Buffer
	for range 2 {
		cmd, stderr, base := startProxyIn(t, bin, dir, "--log", u)
		procs, bases, errs = append(procs, cmd), append(bases, base), append(errs, stderr)
	}
	postTo := func(base string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Retrygate-Job", "both")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range 2 {
		code, _ := postTo(bases[i])
		require.Equal(t, 200, code)
	}
	for i := range 2 {
		code, body := postTo(bases[i])
		assert.Equal(t, 503, code)
		assert.Contains(t, body, "refuse: attempt cap for job both: the job used 2 of 2 attempts")
	}
	assert.Equal(t, 2, srv.Total())
	resp, err := http.Post(bases[1]+"/chat/completions/.", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	for i, cmd := range procs {
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, cmd.Wait(), errs[i].String())
		assert.Contains(t, errs[i].String(), "job budgets shared with every proxy on it")
		assert.NotContains(t, errs[i].String(), "never reached")
		assert.Contains(t, errs[i].String(), "proxy stopped; every row is in")
	}
	st, err := pgstore.Open(context.Background(), u, pgstore.Options{})
	require.NoError(t, err)
	defer st.Close()
	rows, err := st.ReadJob(context.Background(), "both")
	require.NoError(t, err)
	// Every request the proxies answered is a row: the two sent, then the
	// two refusals (a named job's rows carry no job_end: a reader ends it).
	require.Len(t, rows, 4)
	for i, r := range rows {
		assert.Equal(t, i+1, r.Attempt)
		assert.Equal(t, i < 2, r.WasSent(), "row %d", i+1)
		assert.Empty(t, r.JobEnd, "row %d", i+1)
	}
	assert.Equal(t, "refuse: attempt cap", rows[3].Decision)
	// A refusal before any job is an event line in the database's log too.
	var events []string
	require.NoError(t, st.Scan(context.Background(), func(e store.Entry) error {
		if strings.HasPrefix(e.Comment, "# event request ") {
			events = append(events, e.Comment)
		}
		return nil
	}))
	require.Len(t, events, 1)
	assert.Contains(t, events[0], "path=/v1/chat/completions/. served=refused status=404 code=not_found")
}

// proxyProcess is a `retrygate proxy` process in a directory of its own,
// in front of a scripted OpenAI seat named up that answers plans in turn.
type proxyProcess struct {
	srv    *seatserver.Server
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	dir    string
	base   string // the base URL the proxy printed
	post   func(job, body string) (int, string)
}

// servePlans serves plans in turn as a scripted OpenAI seat on loopback
// until the test ends.
func servePlans(t *testing.T, plans proxyPlans) (*seatserver.Server, net.Addr) {
	t.Helper()
	srv, err := seatserver.New(seatserver.Options{Format: seatserver.OpenAI, Planner: plans})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { _ = srv.Serve(ctx, ln); close(served) }()
	t.Cleanup(func() { cancel(); <-served })
	return srv, ln.Addr()
}

// startProxyIn starts `retrygate proxy` on a free loopback port in dir
// (its retrygate.yaml) and returns it once it printed its base URL.
func startProxyIn(t *testing.T, bin, dir string, args ...string) (*exec.Cmd, *bytes.Buffer, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"proxy", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, stderr.String())
	return cmd, stderr, strings.TrimSpace(base)
}

func startProxyProcess(t *testing.T, policy string, plans proxyPlans) *proxyProcess {
	t.Helper()
	bin := retrygateBinary(t)
	srv, addr := servePlans(t, plans)
	dir := t.TempDir()
	cfg := fmt.Sprintf("seats:\n  up: {kind: openai, base_url: \"http://%s/v1\", model: m}\nfallback: [up]\n%s", addr, policy)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(cfg), 0o644))
	cmd, stderr, base := startProxyIn(t, bin, dir)
	post := func(job, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Retrygate-Job", job)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	return &proxyProcess{srv: srv, cmd: cmd, stderr: stderr, dir: dir, base: base, post: post}
}

// A seat's breaker opening in front of live traffic is a `# event
// breaker` line of the proxy's log, as in a rehearsal, naming the model
// (the proxy keeps one a seat and model), and no row's note; report
// reads it as the seat's open span.
func TestProxyBreakerEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	pp := startProxyProcess(t, "breaker: {window: 1m, failure_rate: 0.5, min_requests: 2, cooldown: 30s}\nretry: {base_delay: 10ms, max_delay: 50ms}\n", proxyPlans{
		{Status: 500, Elapsed: 5 * time.Millisecond},
		{Status: 500, Elapsed: 5 * time.Millisecond},
	})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	code, _ := pp.post("a", body) // two attempts, the cap: the breaker opens
	require.Equal(t, 500, code)
	code, msg := pp.post("c", body)
	require.Equal(t, 503, code)
	assert.Contains(t, msg, "refuse: breaker open")
	require.NoError(t, pp.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, pp.cmd.Wait(), pp.stderr.String())

	log, err := os.ReadFile(filepath.Join(pp.dir, "rehearsal.log"))
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^# event breaker seat=up from=closed to=open model=m ts=\S+$`, string(log))
	assert.NotContains(t, string(log), `note="breaker`)
	assert.Len(t, pp.srv.Requests(), 2, "the refused request never reached the seat")
}

// A request that is no attempt (a model list passed through, a method or
// path off the allow-list) is a `# event request` line of the proxy's
// log, never a row: report counts only the attempt.
func TestProxyRequestEventLines(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	pp := startProxyProcess(t, "", proxyPlans{{TTFB: 5 * time.Millisecond, Wait: 10 * time.Millisecond, Elapsed: 20 * time.Millisecond, CompletionTokens: 5}})
	code, _ := pp.post("one", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, code)
	base := pp.base
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{http.MethodPut, "/chat/completions", http.StatusMethodNotAllowed},
		{http.MethodPost, "/chat/completions/../completions", http.StatusNotFound},
		{http.MethodGet, "/models", 0}, // passed through: whatever the seat answers
	} {
		req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(`{}`))
		req.URL.Opaque = strings.TrimPrefix(base, "http:") + c.path // sent as written
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		if c.want != 0 {
			assert.Equal(t, c.want, resp.StatusCode, c.path)
		}
	}
	require.NoError(t, pp.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, pp.cmd.Wait(), pp.stderr.String())
	logPath := filepath.Join(pp.dir, "rehearsal.log")
	log, err := os.ReadFile(logPath)
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^# event request method=PUT path=/v1/chat/completions served=refused status=405 code=method_not_allowed elapsed_s=\S+ client=127\.0\.0\.1 ts=\S+$`, string(log))
	assert.Regexp(t, `(?m)^# event request method=POST path=/v1/chat/completions/\.\./completions served=refused status=404 code=not_found `, string(log))
	assert.Regexp(t, `(?m)^# event request seat=up method=GET path=/v1/models served=pass status=\d+ `, string(log))
	assert.Equal(t, 1, strings.Count(string(log), "\nts="), "one row: the attempt\n%s", log)

	out, err := exec.Command(retrygateBinary(t), "report", logPath).Output()
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^\(all\)\t1\t1\t0\t`, string(out), "rows 1, attempts 1, refused 0")
}
