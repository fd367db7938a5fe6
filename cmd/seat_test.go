package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/rehearse/realtime"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

func TestSeatServeFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    SeatServeOptions
		wantErr string
		hint    string
	}{
		{name: "defaults", args: []string{"--script", "builtin:seed003"},
			want: SeatServeOptions{Script: "builtin:seed003", Format: seatserver.OpenAI, Addr: "127.0.0.1:0"}},
		{name: "anthropic on a fixed port", args: []string{"--script", "s.yaml", "--format", "anthropic", "--addr", "127.0.0.1:6556"},
			want: SeatServeOptions{Script: "s.yaml", Format: seatserver.Anthropic, Addr: "127.0.0.1:6556"}},
		{name: "ipv6 loopback", args: []string{"--script", "s.yaml", "--format", "ollama", "--addr", "[::1]:0"},
			want: SeatServeOptions{Script: "s.yaml", Format: seatserver.Ollama, Addr: "[::1]:0"}},
		{name: "localhost", args: []string{"--script", "s.yaml", "--addr", "localhost:7000"},
			want: SeatServeOptions{Script: "s.yaml", Format: seatserver.OpenAI, Addr: "localhost:7000"}},
		{name: "remote allowed", args: []string{"--script", "s.yaml", "--addr", "0.0.0.0:8080", "--allow-remote"},
			want: SeatServeOptions{Script: "s.yaml", Format: seatserver.OpenAI, Addr: "0.0.0.0:8080", AllowRemote: true}},

		{name: "no script", args: nil, wantErr: "--script: required", hint: "builtin:free-seat"},
		{name: "bad format", args: []string{"--script", "s.yaml", "--format", "grpc"},
			wantErr: `--format: unknown format "grpc" (want openai, anthropic or ollama)`},
		{name: "every interface", args: []string{"--script", "s.yaml", "--addr", "0.0.0.0:8080"},
			wantErr: `--addr: "0.0.0.0" is not a loopback address; refusing to serve off loopback without --allow-remote`},
		{name: "empty host", args: []string{"--script", "s.yaml", "--addr", ":8080"},
			wantErr: `--addr: ":8080" listens on every interface, not only loopback; refusing to serve off loopback without --allow-remote`},
		{name: "a LAN address", args: []string{"--script", "s.yaml", "--addr", "192.168.1.20:80"},
			wantErr: `--addr: "192.168.1.20" is not a loopback address; refusing to serve off loopback without --allow-remote`},
		{name: "not host:port", args: []string{"--script", "s.yaml", "--addr", "127.0.0.1"},
			wantErr: `--addr: not host:port "127.0.0.1" (e.g. 127.0.0.1:0)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := TestStreams()
			f := &Factory{IO: ios, Now: time.Now, Getenv: func(string) string { return "" }, Ctx: context.Background()}
			var got *SeatServeOptions
			c := newSeatServeCmd(f, func(o *SeatServeOptions) error { got = o; return nil })
			c.SetArgs(tt.args)
			c.SetOut(io.Discard)
			c.SetErr(io.Discard)
			err := c.Execute()
			if tt.wantErr != "" {
				require.Error(t, err)
				var ee *exitError
				require.ErrorAs(t, err, &ee)
				assert.Equal(t, ExitBad, ee.Code)
				assert.Equal(t, tt.wantErr, ee.Err.Error())
				assert.Contains(t, ee.Hint, tt.hint)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want.Script, got.Script)
			assert.Equal(t, tt.want.Format, got.Format)
			assert.Equal(t, tt.want.Addr, got.Addr)
			assert.Equal(t, tt.want.AllowRemote, got.AllowRemote)
		})
	}
}

func TestSeatServeBadScript(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("steps:\n  - wait: 1s\n    elapsed: soon\n"), 0o644))
	tests := []struct {
		name, script, want string
	}{
		{"malformed", bad, "^retrygate: " + bad + `:3: steps\[0\]\.elapsed: `},
		{"missing", filepath.Join(dir, "nope.yaml"), "^retrygate: " + filepath.Join(dir, "nope.yaml") + ": cannot read script: "},
		{"unknown builtin", "builtin:nope", `^retrygate: unknown built-in script "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := seatRun(t, context.Background(), nil, "seat", "serve", "--script", tt.script)
			assert.Equal(t, ExitBad, code)
			assert.Empty(t, out, "no base URL before the script is known good")
			assert.Regexp(t, tt.want, errOut)
		})
	}
}

// seatBuffer is a bytes.Buffer that the serving goroutine writes while the
// test reads it.
type seatBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *seatBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *seatBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// seatRun runs one command line with its own streams and returns the exit
// code and what it wrote.
func seatRun(t *testing.T, ctx context.Context, getenv func(string) string, args ...string) (int, string, string) {
	t.Helper()
	out, errOut := &seatBuffer{}, &seatBuffer{}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	f := &Factory{IO: &IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut}, Now: time.Now, Getenv: getenv, Ctx: ctx}
	code := Run(f, args)
	return code, out.String(), errOut.String()
}

// liveSeat is `retrygate seat serve` running in the background of a test.
type liveSeat struct {
	base   string // the first line of stdout
	out    *seatBuffer
	errOut *seatBuffer
	stop   context.CancelFunc
	code   chan int
}

func startSeatServe(t *testing.T, args ...string) *liveSeat {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ls := &liveSeat{out: &seatBuffer{}, errOut: &seatBuffer{}, stop: stop, code: make(chan int, 1)}
	f := &Factory{IO: &IOStreams{In: strings.NewReader(""), Out: ls.out, ErrOut: ls.errOut}, Now: time.Now,
		Getenv: func(string) string { return "" }, Ctx: ctx}
	go func() { ls.code <- Run(f, append([]string{"seat", "serve"}, args...)) }()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		if line, _, ok := strings.Cut(ls.out.String(), "\n"); ok {
			ls.base = line
			break
		}
		select {
		case code := <-ls.code:
			t.Fatalf("seat serve exited %d before printing its URL: %s", code, ls.errOut.String())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatal("seat serve printed no URL within 10s")
		}
	}
	t.Cleanup(func() { ls.shutdown(t) })
	return ls
}

// shutdown is Ctrl-C: serving stops cleanly with exit 0.
func (ls *liveSeat) shutdown(t *testing.T) int {
	t.Helper()
	ls.stop()
	select {
	case code := <-ls.code:
		ls.code <- code // for a second call (the cleanup)
		return code
	case <-time.After(5 * time.Second):
		t.Fatal("seat serve did not stop within 5s of Ctrl-C")
		return -1
	}
}

func (ls *liveSeat) origin() string {
	return strings.TrimSuffix(ls.base, "/v1")
}

func (ls *liveSeat) requests(t *testing.T) (seatserver.RequestsResponse, string) {
	t.Helper()
	resp, err := http.Get(ls.origin() + seatserver.RequestsPath)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var rr seatserver.RequestsResponse
	require.NoError(t, json.Unmarshal(raw, &rr))
	return rr, string(raw)
}

const (
	seatTestKeyEnv = "SERVED_SEAT_KEY"
	seatTestKey    = "sk-planted-CLI-4e1d7c0a9b"
	seatTestPrompt = "PROMPT-CANARY please draft the merger memo"
)

// quickScript: an answer, a 429 with Retry-After, then a hang.
const quickScript = `name: quick
model: scratch-1
steps:
  - ttfb: 40ms
    wait: 100ms
    elapsed: 250ms
    prompt_tokens: 42
    completion_tokens: 30
  - status: 429
    elapsed: 30ms
    retry_after: 2s
  - ttfb: 20ms
    hang: true
`

// `seat serve` and `time` together, end to end, in every wire format:
// the served script is timed by our own seats through the CLI, a hard
// timeout reaches the server, Ctrl-C stops it, and no key or prompt
// shows anywhere.
func TestSeatServeAndTime(t *testing.T) {
	dir := t.TempDir()
	scriptPath := filepath.Join(dir, "quick.yaml")
	require.NoError(t, os.WriteFile(scriptPath, []byte(quickScript), 0o644))
	promptPath := filepath.Join(dir, "prompt.txt")
	require.NoError(t, os.WriteFile(promptPath, []byte(seatTestPrompt), 0o644))
	getenv := func(k string) string {
		if k == seatTestKeyEnv {
			return seatTestKey
		}
		return ""
	}
	for _, format := range []string{"openai", "anthropic", "ollama"} {
		t.Run(format, func(t *testing.T) {
			ls := startSeatServe(t, "--script", scriptPath, "--format", format)
			wantBase := "http://127.0.0.1:"
			assert.True(t, strings.HasPrefix(ls.base, wantBase), ls.base)
			if format == "ollama" {
				assert.NotContains(t, ls.base, "/v1")
			} else {
				assert.True(t, strings.HasSuffix(ls.base, "/v1"), ls.base)
			}
			cfg := filepath.Join(dir, format+".yaml")
			require.NoError(t, os.WriteFile(cfg, []byte(`timeouts: {soft: 6s, hard: 10s}
seats:
  served: {kind: `+format+`, base_url: "`+ls.base+`", model: scratch-1, api_key_env: `+seatTestKeyEnv+`}
`), 0o644))
			timeIt := func(extra ...string) (timeJSON, string) {
				args := append([]string{"time", "--config", cfg, "--seat", "served", "--prompt-file", promptPath, "--json"}, extra...)
				code, out, errOut := seatRun(t, context.Background(), getenv, args...)
				require.Equal(t, ExitOK, code, errOut)
				var tj timeJSON
				require.NoError(t, json.Unmarshal([]byte(out), &tj), out)
				return tj, out + errOut
			}

			ok, okText := timeIt("--job", "job-ok")
			assert.Equal(t, "ok", string(ok.Outcome))
			assert.Equal(t, "usage", ok.TokensFrom)
			assert.Equal(t, int64(42), ok.PromptTokens)
			assert.Equal(t, int64(30), ok.CompletionTokens)
			require.NotNil(t, ok.TTFBS)
			require.NotNil(t, ok.WaitS)
			// Never early; late by a cold first connection at most, so the
			// bound is generous (the seatserver tests hold it tighter).
			for _, m := range []struct{ got, plan float64 }{{*ok.TTFBS, 0.040}, {*ok.WaitS, 0.100}, {ok.ElapsedS, 0.250}} {
				assert.GreaterOrEqual(t, m.got, m.plan)
				assert.Less(t, m.got, m.plan+0.3)
			}
			assert.Equal(t, "job-ok", ok.Job)

			limited, limitedText := timeIt()
			assert.Equal(t, "rate_limited", string(limited.Outcome))
			require.NotNil(t, limited.HTTPStatus)
			assert.Equal(t, 429, *limited.HTTPStatus)
			require.NotNil(t, limited.RetryAfterS)
			assert.Equal(t, 2.0, *limited.RetryAfterS)

			hung, hungText := timeIt("--hard-timeout", "0.2")
			gaveUp := time.Now()
			assert.Equal(t, "timeout", string(hung.Outcome))
			assert.Equal(t, "ambiguous", string(hung.Billing))
			assert.GreaterOrEqual(t, hung.ElapsedS, 0.2)
			assert.Less(t, hung.ElapsedS, realtime.By(200*time.Millisecond).Seconds(), "ended by its hard timeout")

			// The cancellation reached the server: the event, awaited up
			// to a ceiling only a hang reaches (realtime).
			var rr seatserver.RequestsResponse
			var raw string
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				rr, raw = ls.requests(t)
				if len(rr.Requests) == 3 && rr.Requests[2].Cancelled {
					break
				}
				require.Less(t, time.Since(gaveUp), realtime.Hang(), "hang not seen cancelled: %s", raw)
				<-tick.C
			}
			assert.Equal(t, "job-ok", rr.Requests[0].IdempotencyKey)
			assert.Equal(t, []string{"finished", "finished", "cancelled"},
				[]string{rr.Requests[0].State, rr.Requests[1].State, rr.Requests[2].State})
			assert.Contains(t, ls.errOut.String(), "seat: request 2 cancelled by client after 0.")

			assert.Equal(t, ExitOK, ls.shutdown(t))
			assert.Contains(t, ls.errOut.String(), "seat: stopped after 3 requests")
			for _, text := range []string{ls.out.String(), ls.errOut.String(), raw, okText, limitedText, hungText} {
				assert.NotContains(t, text, seatTestKey)
				assert.NotContains(t, text, "PROMPT-CANARY")
				assert.NotContains(t, text, "merger")
			}
		})
	}
}

func TestSeatHelp(t *testing.T) {
	code, out, _ := seatRun(t, context.Background(), nil, "seat", "serve", "--help")
	assert.Equal(t, ExitOK, code)
	for _, want := range []string{"EXIT STATUS", "--allow-remote", "/_retrygate/requests", "http://127.0.0.1:PORT/v1"} {
		assert.Contains(t, out, want)
	}
}
