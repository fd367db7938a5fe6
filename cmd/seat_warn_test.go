package cmd

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A wrong key: every attempt gets 401. time and rehearse still exit 0 (a
// failing seat is data), and each says, after its output, that the seat
// refused every attempt as unauthorized, naming the seat, its URL and the
// variable the key came from, never the key.
func TestWrongKeyIsSaid(t *testing.T) {
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`))
		}))
		defer srv.Close()
		cfg := filepath.Join(t.TempDir(), "retrygate.yaml")
		require.NoError(t, os.WriteFile(cfg, []byte(`budget: {deadline: 10s, max_attempts: 2}
retry: {base_delay: 1ms, max_delay: 2ms}
seats:
  scratch: {kind: openai, base_url: "`+srv.URL+`/v1", model: gpt-4o-mini, api_key_env: SCRATCH_KEY}
fallback: [scratch]
`), 0o644))
		getenv := func(k string) string {
			if k == "SCRATCH_KEY" {
				return "sk-wrong-" + secretMark
			}
			return ""
		}
		want := "retrygate: warning: seat scratch (" + srv.URL + "/v1): every attempt was refused as unauthorized (HTTP " + strconv.Itoa(status) + ", "
		for _, args := range [][]string{
			{"time", "--config", cfg, "--seat", "scratch"},
			{"rehearse", "--config", cfg, "--jobs", "2", "--log", filepath.Join(t.TempDir(), "rehearsal.log")},
		} {
			code, out, errOut := seatRun(t, context.Background(), getenv, args...)
			assert.Equal(t, ExitOK, code, "%s: a seat refusing the key is data, not a tool error\n%s", args[0], errOut)
			assert.Contains(t, errOut, want, args[0])
			assert.Contains(t, errOut, "retrygate: hint: is $SCRATCH_KEY the key for this endpoint", args[0])
			assert.Contains(t, out, "client_error", "%s: the output comes first", args[0])
			secretLeak(t, args[0]+" stderr", errOut)
			secretLeak(t, args[0]+" stdout", out)
		}
	}
}

// A wrong port: time says so as rehearse does (it said nothing).
func TestTimeNothingConnects(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cfg := filepath.Join(t.TempDir(), "retrygate.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("seats:\n  local: {kind: openai, base_url: \"http://"+addr+"/v1\", model: m}\n"), 0o644))
	code, out, errOut := seatRun(t, context.Background(), nil, "time", "--config", cfg, "--seat", "local")
	assert.Equal(t, ExitOK, code, errOut)
	assert.Contains(t, out, "conn_error")
	assert.Contains(t, errOut, "retrygate: warning: every attempt failed to connect (1 of 1, conn_error): seat local (http://"+addr+"/v1)\n")
	assert.True(t, strings.HasSuffix(errOut, "the log's notes say what the connection got\n"), errOut)
}
