package cmd

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The canaries: a key in the environment variable a seat names, and a
// prompt. Every piece of either carries secretMark, so an echo of a
// fragment is caught too.
const (
	secretMark   = "C4N4RY"
	secretKey    = "sk-proj-" + secretMark + "7f3a9c2e1b5d4a8e"
	secretPrompt = "PROMPT-" + secretMark + " reply with one word"
	secretEnv    = "RG_SECRET_TEST_KEY"
)

// secretLeak fails the test when text holds any canary.
func secretLeak(t *testing.T, where, text string) {
	t.Helper()
	if strings.Contains(strings.ToUpper(text), secretMark) {
		i := strings.Index(strings.ToUpper(text), secretMark)
		from, to := max(i-80, 0), min(i+80, len(text))
		t.Errorf("secret leaked into %s: …%s…", where, text[from:to])
	}
}

// secretEcho is a seat server that echoes what it was sent — the key,
// the query string, the prompt — back in error bodies, headers, error
// codes, content types and stream events, and counts what reached it.
type secretEcho struct {
	url       string
	keySeen   atomic.Int64 // requests whose key header carried the key
	querySeen atomic.Int64 // requests whose query string carried the key
}

func newSecretEcho(t *testing.T) *secretEcho {
	t.Helper()
	e := &secretEcho{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if k := r.Header.Get("X-Api-Key"); k != "" {
			key = k
		}
		if strings.Contains(key, secretMark) {
			e.keySeen.Add(1)
		}
		if strings.Contains(r.URL.RawQuery, secretMark) {
			e.querySeen.Add(1)
		}
		echo := key + " " + r.URL.RawQuery + " " + string(body)
		msg := fmt.Sprintf("%q", "Incorrect API key provided: "+echo)
		h := w.Header()
		h.Set("X-Echo-Key", key)
		h.Set("X-Request-Id", key)
		h.Set("X-Echo-Query", r.URL.RawQuery)
		switch {
		case strings.HasPrefix(r.URL.Path, "/e401/"):
			h.Set("Content-Type", "application/json")
			h.Set("Retry-After", key)
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":{"code":%q,"type":%q,"message":%s}}`, key, key, msg)
		case strings.HasPrefix(r.URL.Path, "/e429/"):
			h.Set("Content-Type", "application/json")
			h.Set("Retry-After-Ms", key)
			w.WriteHeader(http.StatusTooManyRequests)
			// A fragment of the key as the code: short enough to look like one.
			fmt.Fprintf(w, `{"error":{"code":%q,"message":%s}}`, key[3:19], msg)
		case strings.HasPrefix(r.URL.Path, "/eupper/"):
			// A proxy that shouts: the key, upper-cased, as the error code.
			h.Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"code":%q,"message":%s}}`, strings.ToUpper(key), msg)
		case strings.HasPrefix(r.URL.Path, "/estream/"):
			h.Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", "echo "+echo)
			fmt.Fprintf(w, "data: {\"error\":{\"code\":%q,\"message\":%s}}\n\n", key, msg)
		case strings.HasPrefix(r.URL.Path, "/ect/"):
			h.Set("Content-Type", "application/"+key)
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, echo)
		case strings.HasPrefix(r.URL.Path, "/anth/"):
			h.Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":%s}}`, key, msg)
		default: // ollama
			h.Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"error":%s}`, msg)
		}
	}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// secretClosedPort is a loopback port nobody listens on.
func secretClosedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestSecretsNeverLeave puts a canary key in the environment variable
// the seats name, has servers echo it back (error bodies, headers, error
// codes, content types, stream events), puts it in the base URLs' query
// strings, and sends a canary prompt: neither appears in the log, stdout,
// stderr or an error message of rehearse, time, seat serve or report.
func TestSecretsNeverLeave(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	bin := retrygateBinary(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "crash.yaml")
	require.NoError(t, os.WriteFile(script, []byte(crashScript), 0o644))
	srv := crashStartServe(t, bin, script)
	echo := newSecretEcho(t)
	q := "?api-key=" + secretKey
	cfg := fmt.Sprintf(`budget: {deadline: 20s, token_ceiling: 1000000, max_attempts: 2, max_wait: 2s}
retry: {base_delay: 10ms, max_delay: 50ms}
timeouts: {soft: 1s, hard: 2s}
breaker: {failure_rate: 0}
seats:
  served:  {kind: openai, base_url: %q, model: gpt-4o-mini, api_key_env: %s}
  e401:    {kind: openai, base_url: %q, model: gpt-4o-mini, api_key_env: %s}
  e429:    {kind: openai, base_url: %q, model: gpt-4o-mini, api_key_env: %s}
  eupper:  {kind: openai, base_url: %q, model: gpt-4o-mini, api_key_env: %s}
  estream: {kind: openai, base_url: %q, model: gpt-4o-mini, api_key_env: %s}
  ect:     {kind: openai, base_url: %q, model: gpt-4o-mini, api_key_env: %s}
  anth:    {kind: anthropic, base_url: %q, model: claude-3-5-haiku-latest, api_key_env: %s}
  oll:     {kind: ollama, base_url: %q, model: llama3, api_key_env: %s}
  down:    {kind: openai, base_url: %q, model: gpt-4o-mini, api_key_env: %s}
fallback: [e401, estream, served]
`, srv.base+q, secretEnv,
		echo.url+"/e401/v1"+q, secretEnv, echo.url+"/e429/v1"+q, secretEnv, echo.url+"/eupper/v1"+q, secretEnv,
		echo.url+"/estream/v1"+q, secretEnv, echo.url+"/ect/v1"+q, secretEnv,
		echo.url+"/anth/v1"+q, secretEnv, echo.url+"/oll"+q, secretEnv,
		"http://"+secretClosedPort(t)+"/v1"+q, secretEnv)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(cfg), 0o644))
	env := []string{secretEnv + "=" + secretKey}

	run := func(args ...string) hostileResult {
		t.Helper()
		res := hostileRun(t, bin, dir, env, args...)
		line := "retrygate " + strings.Join(args, " ")
		secretLeak(t, line+" stdout", res.stdout)
		secretLeak(t, line+" stderr", res.stderr)
		assert.NotContains(t, res.stderr, "panic", line)
		return res
	}
	seats := []string{"served", "e401", "e429", "eupper", "estream", "ect", "anth", "oll", "down"}
	for _, s := range seats {
		res := run("rehearse", "--seat", s, "--jobs", "2", "--prompt", secretPrompt)
		// A seat that never connects is data too (exit 0): the warning on
		// stderr names it by its URL minus the query.
		assert.Equal(t, ExitOK, res.code, "rehearse --seat %s: %s", s, res.stderr)
		res = run("time", "--seat", s, "--prompt", secretPrompt)
		assert.Equal(t, ExitOK, res.code, "time --seat %s: %s", s, res.stderr)
		run("time", "--seat", s, "--json")
	}
	res := run("rehearse", "--jobs", "3", "--concurrency", "2", "--json")
	assert.Equal(t, ExitOK, res.code, res.stderr)

	// Keys in the wrong places: refused, and the refusal quotes none of them.
	bad := map[string]string{
		"userinfo":        fmt.Sprintf("{kind: openai, base_url: %q, model: m, api_key_env: %s}", "http://user:"+secretKey+"@127.0.0.1:1/v1", secretEnv),
		"key as name":     fmt.Sprintf("{kind: openai, base_url: http://127.0.0.1:1/v1, model: m, api_key_env: %s}", secretKey),
		"unset lookalike": fmt.Sprintf("{kind: openai, base_url: http://127.0.0.1:1/v1, model: m, api_key_env: sk_%s_abcdefghijklmnopqrstuvwxyz0123456789}", secretMark),
		"literal key":     fmt.Sprintf("{kind: openai, base_url: http://127.0.0.1:1/v1, model: m, api_key: %s}", secretKey),
		"bad url":         fmt.Sprintf("{kind: openai, base_url: %q, model: m, api_key_env: %s}", "ht!tp://127.0.0.1:1/v1"+q, secretEnv),
		"no scheme":       fmt.Sprintf("{kind: openai, base_url: %q, model: m, api_key_env: %s}", "127.0.0.1:1/v1"+q, secretEnv),
	}
	for name, seatCfg := range bad {
		file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		require.NoError(t, os.WriteFile(file, []byte("seats:\n  bad: "+seatCfg+"\n"), 0o644))
		for _, verb := range []string{"rehearse", "time"} {
			res := run(verb, "--config", file, "--seat", "bad")
			assert.Equal(t, ExitBad, res.code, "%s with a %s seat is bad input: %s", verb, name, res.stderr)
		}
	}

	// The log, and report on it.
	logData, err := os.ReadFile(filepath.Join(dir, "rehearsal.log"))
	require.NoError(t, err)
	secretLeak(t, "rehearsal.log", string(logData))
	for _, args := range [][]string{{"report"}, {"report", "--json"}, {"report", "--csv"}, {"report", "--by", "outcome"}, {"report", "--by", "job", "--json"}} {
		res := run(args...)
		assert.Equal(t, ExitOK, res.code, res.stderr)
	}

	// seat serve: what it says about the requests it got.
	resp, err := http.Get(srv.base[:strings.LastIndex(srv.base, "/v1")] + "/_retrygate/requests")
	require.NoError(t, err)
	reqs, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	secretLeak(t, "seat serve /_retrygate/requests", string(reqs))
	assert.Contains(t, string(reqs), `"index"`, "seat serve was asked")
	srv.stop(t)
	secretLeak(t, "seat serve stdout", srv.outText())
	secretLeak(t, "seat serve stderr", srv.errText())

	// The canaries were really in play.
	assert.Positive(t, echo.keySeen.Load(), "the key reached the echo server")
	assert.Positive(t, echo.querySeen.Load(), "the query string reached the echo server")
	t.Logf("echo server saw the key in %d requests and the query in %d; log %d bytes; seat serve requests JSON %d bytes",
		echo.keySeen.Load(), echo.querySeen.Load(), len(logData), len(reqs))
}
