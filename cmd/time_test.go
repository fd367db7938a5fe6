package cmd

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// timeConfig writes a config with a script seat, an HTTP seat and an
// exec seat, and returns its path.
func timeConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "retrygate.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`budget: {max_wait: 4s}
timeouts: {soft: 3s, hard: 20s}
retry: {slow_5xx_after: 8s}
seats:
  Demo: {kind: script, script: "builtin:seed003"}
  scratch: {kind: openai, base_url: "http://127.0.0.1:9/v1", model: gpt-4o-mini, api_key_env: OPENAI_API_KEY}
`), 0o644))
	return path
}

var timeNow = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

func TestTimeFlags(t *testing.T) {
	cfg := timeConfig(t)
	promptFile := filepath.Join(t.TempDir(), "p.txt")
	require.NoError(t, os.WriteFile(promptFile, []byte("from a file"), 0o644))
	tests := []struct {
		name    string
		args    []string
		check   func(t *testing.T, o *TimeOptions)
		wantErr string
	}{
		{name: "defaults from the policy", args: []string{"--seat", "scratch"}, check: func(t *testing.T, o *TimeOptions) {
			assert.Equal(t, "scratch", o.Seat.Name)
			assert.Equal(t, "openai", o.Seat.Kind)
			assert.Equal(t, 20*time.Second, o.HardTimeout)
			assert.Equal(t, 4*time.Second, o.WaitCap)
			assert.Equal(t, 256, o.MaxTokens)
			assert.Equal(t, 1, o.Call)
			assert.Equal(t, defaultPrompt, o.Prompt)
			assert.Equal(t, "time-1773478800000", o.Job)
			assert.Equal(t, 3*time.Second, o.Policy.Timeouts.Soft)
			assert.False(t, o.JSON)
		}},
		{name: "flags win", args: []string{"--seat", "SCRATCH", "--hard-timeout", "1.5", "--wait-cap", "250ms",
			"--max-tokens", "64", "--prompt", "hello", "--job", "j1", "--json"}, check: func(t *testing.T, o *TimeOptions) {
			assert.Equal(t, "scratch", o.Seat.Name)
			assert.Equal(t, 1500*time.Millisecond, o.HardTimeout)
			assert.Equal(t, 250*time.Millisecond, o.WaitCap)
			assert.Equal(t, 64, o.MaxTokens)
			assert.Equal(t, "hello", o.Prompt)
			assert.Equal(t, "j1", o.Job)
			assert.True(t, o.JSON)
		}},
		{name: "wait cap 0 is none", args: []string{"--seat", "demo", "--wait-cap", "0", "--call", "2"}, check: func(t *testing.T, o *TimeOptions) {
			assert.Zero(t, o.WaitCap)
			assert.Equal(t, 2, o.Call)
			assert.Equal(t, "script", o.Seat.Kind)
		}},
		{name: "prompt file", args: []string{"--seat", "demo", "--prompt-file", promptFile}, check: func(t *testing.T, o *TimeOptions) {
			assert.Equal(t, "from a file", o.Prompt)
		}},

		{name: "no seat", args: nil, wantErr: "--seat: required"},
		{name: "unknown seat", args: []string{"--seat", "nope"}, wantErr: `--seat: no seat named "nope" under seats`},
		{name: "bad hard timeout", args: []string{"--seat", "demo", "--hard-timeout", "soon"},
			wantErr: `--hard-timeout: not a duration "soon" (want e.g. 45s, 1500ms or 45)`},
		{name: "zero hard timeout", args: []string{"--seat", "demo", "--hard-timeout", "0"}, wantErr: "--hard-timeout: must be positive"},
		{name: "negative wait cap", args: []string{"--seat", "demo", "--wait-cap", "-1s"}, wantErr: `--wait-cap: negative duration "-1s"`},
		{name: "zero max tokens", args: []string{"--seat", "demo", "--max-tokens", "0"}, wantErr: "--max-tokens: want 1 to 16777216, got 0"},
		{name: "words for max tokens", args: []string{"--seat", "demo", "--max-tokens", "lots"}, wantErr: `--max-tokens: not a whole number "lots"`},
		{name: "call on an http seat", args: []string{"--seat", "scratch", "--call", "2"}, wantErr: `--call: only for script seats; seat "scratch" is kind openai`},
		{name: "call 0", args: []string{"--seat", "demo", "--call", "0"}, wantErr: "--call: want 1 to 2147483647, got 0"},
		{name: "both prompts", args: []string{"--seat", "demo", "--prompt", "x", "--prompt-file", promptFile},
			wantErr: "--prompt and --prompt-file: give one or the other"},
		{name: "empty prompt", args: []string{"--seat", "demo", "--prompt", "  "}, wantErr: "--prompt: empty prompt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := TestStreams()
			f := &Factory{IO: ios, Now: func() time.Time { return timeNow }, Getenv: func(string) string { return "" },
				Ctx: context.Background(), ConfigFile: cfg}
			var got *TimeOptions
			c := newTimeCmd(f, func(o *TimeOptions) error { got = o; return nil })
			c.SetArgs(tt.args)
			c.SetOut(io.Discard)
			c.SetErr(io.Discard)
			err := c.Execute()
			if tt.wantErr != "" {
				var ee *exitError
				require.ErrorAs(t, err, &ee)
				assert.Equal(t, ExitBad, ee.Code)
				assert.Equal(t, tt.wantErr, ee.Err.Error())
				return
			}
			require.NoError(t, err)
			tt.check(t, got)
		})
	}
}

// Script seats resolve on the virtual clock: exact output, every run.
func TestTimeScriptSeat(t *testing.T) {
	cfg := timeConfig(t)
	code, out, errOut := seatRun(t, context.Background(), nil, "time", "--config", cfg, "--seat", "demo")
	require.Equal(t, ExitOK, code, errOut)
	assert.Equal(t, `field	value
seat	demo
kind	script
model	scratch
clock	virtual
outcome	reset
billing	billable
http_status	200
ttfb_s	1.200
wait_s	1.200
elapsed_s	7.200
prompt_tokens	1500
completion_tokens	600
tokens_from	script
retry_after_s	-
error_code	-
bytes	0
hard_timeout_s	20.000
wait_cap_s	4.000
`, out)
	assert.Empty(t, errOut)

	// Seed 003's second attempt: an 18 s queue against the 4 s cap. Its
	// wait is at least the 4 s it was cut off at, as the log writes it.
	code, out, _ = seatRun(t, context.Background(), nil, "time", "--config", cfg, "--seat", "demo", "--call", "2", "--json")
	require.Equal(t, ExitOK, code)
	assert.JSONEq(t, `{
  "seat": "demo", "kind": "script", "model": "scratch", "clock": "virtual",
  "outcome": "wait_cap", "billing": "ambiguous",
  "http_status": null, "ttfb_s": null, "wait_s": 4, "elapsed_s": 4,
  "prompt_tokens": 1500, "completion_tokens": 0, "tokens": 1500, "tokens_from": "script",
  "retry_after_s": null, "bytes": 0, "hard_timeout_s": 20, "wait_cap_s": 4
}`, out)
}

// A seat that cannot be built (its key's variable unset) is bad input;
// a seat that fails when called is data: exit 0.
func TestTimeSeatErrors(t *testing.T) {
	cfg := timeConfig(t)
	code, _, errOut := seatRun(t, context.Background(), nil, "time", "--config", cfg, "--seat", "scratch")
	assert.Equal(t, ExitBad, code)
	assert.Equal(t, "retrygate: "+cfg+":6: seats.scratch.api_key_env: environment variable OPENAI_API_KEY is not set\n", errOut)

	// Port 9 on loopback: nothing listens, the connection is refused.
	getenv := func(k string) string {
		if k == "OPENAI_API_KEY" {
			return "sk-planted-refused-0000"
		}
		return ""
	}
	code, out, errOut := seatRun(t, context.Background(), getenv, "time", "--config", cfg, "--seat", "scratch", "--json")
	assert.Equal(t, ExitOK, code, errOut)
	assert.Contains(t, out, `"outcome": "conn_error"`)
	assert.Contains(t, out, `"billing": "free"`)
	assert.NotContains(t, out+errOut, "sk-planted")
}

func TestTimeHelp(t *testing.T) {
	code, out, _ := seatRun(t, context.Background(), nil, "time", "--help")
	assert.Equal(t, ExitOK, code)
	assert.Contains(t, out, "EXIT STATUS")
	assert.Contains(t, out, "--hard-timeout")
}

// time shows the token parts the provider reported (a llama-server that
// reported 766 of 767 prompt tokens cached showed none), and leaves out
// the ones it did not.
func TestTimeShowsTokenParts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}`+"\n\n"+
			`data: {"choices":[],"usage":{"prompt_tokens":767,"completion_tokens":40,"prompt_tokens_details":{"cached_tokens":766},"completion_tokens_details":{"reasoning_tokens":12}}}`+"\n\ndata: [DONE]\n\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	path := filepath.Join(t.TempDir(), "retrygate.yaml")
	require.NoError(t, os.WriteFile(path, []byte("seats:\n  llama: {kind: openai, base_url: \"http://"+ln.Addr().String()+"/v1\", model: m}\n"), 0o644))

	code, out, errOut := seatRun(t, context.Background(), nil, "time", "--config", path, "--seat", "llama")
	require.Equal(t, ExitOK, code, errOut)
	assert.Contains(t, out, "\nprompt_tokens\t767\ncompletion_tokens\t40\ntokens_from\tusage\ncached_tokens\t766\nreasoning_tokens\t12\nretry_after_s\t-\n")
	assert.NotContains(t, out, "cache_write_tokens")

	code, out, errOut = seatRun(t, context.Background(), nil, "time", "--config", path, "--seat", "llama", "--json")
	require.Equal(t, ExitOK, code, errOut)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, 766.0, got["cached_tokens"])
	assert.Equal(t, 12.0, got["reasoning_tokens"])
	assert.NotContains(t, got, "cache_write_tokens")
}
