package seatserver

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/rehearse/realtime"
	"github.com/retrygate/retrygate/rehearse/script"
	"github.com/retrygate/retrygate/rehearse/seat"
)

func TestCheckLoopback(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:0", true},
		{"127.0.0.1:6556", true},
		{"127.1.2.3:80", true},
		{"[::1]:0", true},
		{"localhost:0", true},
		{"LocalHost:8080", true},
		{":0", false},
		{"0.0.0.0:0", false},
		{"[::]:0", false},
		{"192.168.1.10:80", false},
		{"10.0.0.1:0", false},
		{"example.com:80", false},
		{"127.0.0.1", false}, // no port
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			err := CheckLoopback(tt.addr)
			if tt.ok {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}

func TestFormats(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 41234}
	tests := []struct {
		f          Format
		path, base string
	}{
		{OpenAI, "/v1/chat/completions", "http://127.0.0.1:41234/v1"},
		{Anthropic, "/v1/messages", "http://127.0.0.1:41234/v1"},
		{Ollama, "/api/chat", "http://127.0.0.1:41234"},
	}
	for _, tt := range tests {
		f, err := ParseFormat(string(tt.f))
		require.NoError(t, err)
		assert.Equal(t, tt.path, f.Path())
		assert.Equal(t, tt.base, f.BaseURL(addr))
	}
	v6 := &net.TCPAddr{IP: net.IPv6loopback, Port: 9}
	assert.Equal(t, "http://[::1]:9/v1", OpenAI.BaseURL(v6))
	_, err := ParseFormat("gemini")
	assert.EqualError(t, err, `unknown format "gemini" (want openai, anthropic or ollama)`)
}

func TestSummary(t *testing.T) {
	tests := []struct {
		plan seat.Plan
		want string
	}{
		{seat.Plan{ConnError: true}, "conn_error"},
		{seat.Plan{TTFB: 100 * ms, Wait: 150 * ms, Elapsed: 400 * ms, PromptTokens: 120, CompletionTokens: 40},
			"status=200 ttfb=0.100 wait=0.150 elapsed=0.400 tokens=120+40"},
		{seat.Plan{Elapsed: 50 * ms, Status: 429, RetryAfter: 2 * time.Second, HasRetryAfter: true},
			"status=429 elapsed=0.050 retry_after=2.000"},
		{seat.Plan{TTFB: 500 * ms, Wait: script.Never, Hang: true}, "status=200 ttfb=0.500 wait=never hang"},
		{seat.Plan{Wait: time.Second, Elapsed: 7 * time.Second, ResetAfter: 3 * time.Second, NoUsage: true, CompletionTokens: 9},
			"status=200 wait=1.000 elapsed=7.000 tokens=0+9 no_usage reset_after=3.000"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Summary(tt.plan))
	}
}

func TestTimeline(t *testing.T) {
	type ev struct {
		at   time.Duration
		kind stepKind
	}
	tests := []struct {
		name      string
		plan      seat.Plan
		stream    bool
		want      []ev
		wantReset time.Duration
	}{
		{"error status: headers and body at elapsed",
			seat.Plan{TTFB: 10 * ms, Wait: 10 * ms, Elapsed: 80 * ms, Status: 503}, true,
			[]ev{{80 * ms, stepError}}, 0},
		{"ttfb 0 means with the first content",
			seat.Plan{Wait: 50 * ms, Elapsed: 50 * ms, CompletionTokens: 1}, true,
			[]ev{{50 * ms, stepHeaders}, {50 * ms, stepContent}, {50 * ms, stepFinish}}, 0},
		{"content spread from wait to elapsed",
			seat.Plan{TTFB: 10 * ms, Wait: 20 * ms, Elapsed: 30 * ms, CompletionTokens: 3}, true,
			[]ev{{10 * ms, stepHeaders}, {20 * ms, stepContent}, {25 * ms, stepContent}, {30 * ms, stepContent}, {30 * ms, stepFinish}}, 0},
		{"hang without wait: headers at ttfb, then nothing",
			seat.Plan{TTFB: 100 * ms, Wait: script.Never, Hang: true}, true,
			[]ev{{100 * ms, stepHeaders}}, 0},
		{"hang without ttfb or wait: nothing at all",
			seat.Plan{TTFB: script.Never, Wait: script.Never, Hang: true}, true,
			nil, 0},
		{"hang with wait: one content chunk, then stalls",
			seat.Plan{TTFB: 10 * ms, Wait: 40 * ms, Hang: true}, true,
			[]ev{{10 * ms, stepHeaders}, {40 * ms, stepContent}}, 0},
		{"reset at the last byte still drops the end",
			seat.Plan{Wait: 10 * ms, Elapsed: 10 * ms, ResetAfter: 10 * ms, CompletionTokens: 1}, true,
			[]ev{{10 * ms, stepHeaders}, {10 * ms, stepContent}, {10 * ms, stepFinish}}, 10 * ms},
		{"reset after elapsed is no reset",
			seat.Plan{Wait: 10 * ms, Elapsed: 10 * ms, ResetAfter: 20 * ms, CompletionTokens: 1}, true,
			[]ev{{10 * ms, stepHeaders}, {10 * ms, stepContent}, {10 * ms, stepFinish}}, 0},
		{"error inside a 200 stream",
			seat.Plan{TTFB: 5 * ms, Wait: 5 * ms, Elapsed: 60 * ms, ErrorCode: "overloaded_error"}, true,
			[]ev{{5 * ms, stepHeaders}, {60 * ms, stepStreamError}}, 0},
		{"whole response at elapsed",
			seat.Plan{TTFB: 5 * ms, Wait: 20 * ms, Elapsed: 60 * ms, CompletionTokens: 4}, false,
			[]ev{{60 * ms, stepWhole}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, reset := timeline(tt.plan, tt.stream)
			var got []ev
			for _, s := range steps {
				got = append(got, ev{s.at, s.kind})
			}
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.wantReset, reset)
		})
	}
}

func TestTimelineBoundsChunks(t *testing.T) {
	steps, _ := timeline(seat.Plan{Wait: time.Second, Elapsed: 2 * time.Second, CompletionTokens: 100_000}, true)
	var text strings.Builder
	var chunks int
	for _, s := range steps {
		if s.kind == stepContent {
			chunks++
			text.WriteString(s.text)
		}
	}
	assert.Equal(t, 201, chunks, "one chunk per 5ms of the streaming span")
	assert.Equal(t, filler(0, 100_000), text.String(), "every word, in order, exactly once")
}

func TestNotFoundAndMethod(t *testing.T) {
	r := serve(t, Anthropic, okPlan)
	resp, err := http.Post(r.origin+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.JSONEq(t, `{"type":"error","error":{"type":"not_found_error","message":"no such endpoint: this seat server speaks anthropic on /v1/messages"}}`, string(body))

	resp, err = http.Get(r.origin + "/v1/messages")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Empty(t, r.requests(t).Requests, "neither is a request the planner plays")
}

func TestMalformedBodyIsRejected(t *testing.T) {
	r := serve(t, OpenAI, okPlan)
	resp, err := http.Post(r.baseURL(OpenAI)+"/chat/completions", "application/json", strings.NewReader(`{"model":`))
	require.NoError(t, err)
	var body map[string]map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, "invalid_request_error", body["error"]["type"])
	rec := r.requests(t).Requests[0]
	assert.Equal(t, StateRejected, rec.State)
	assert.Equal(t, 400, rec.Status)

	// Each format's own error type for its status, as for a scripted error.
	a := serve(t, Anthropic, okPlan)
	resp, err = http.Post(a.baseURL(Anthropic)+"/messages", "application/json", strings.NewReader(`{"model":`))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":"request body is not a JSON object"}}`, string(b))
}

// Stopping the server ends a hang at once instead of waiting for its
// client, and the hang is marked shutdown, not cancelled by the client.
func TestServeStopsWithHangInFlight(t *testing.T) {
	log := &syncBuffer{}
	srv, err := New(Options{Planner: plans{{TTFB: 5 * ms, Wait: script.Never, Hang: true}}, Format: OpenAI, Log: log})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()

	resp, err := http.Post(OpenAI.BaseURL(ln.Addr())+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "headers came at ttfb")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(realtime.Hang()):
		t.Fatalf("Serve did not return within %s of its context ending", realtime.Hang())
	}
	recs := srv.Requests()
	require.Len(t, recs, 1)
	assert.Equal(t, StateShutdown, recs[0].State)
	assert.False(t, recs[0].Cancelled)
	assert.NotContains(t, log.String(), "cancelled by client")
}

func TestNewRefusesBadOptions(t *testing.T) {
	_, err := New(Options{Format: OpenAI})
	assert.EqualError(t, err, "seatserver: no planner")
	_, err = New(Options{Planner: plans{okPlan}, Format: "grpc"})
	assert.Error(t, err)
}

// Headers go out at ttfb in every format, even Ollama's, which has no
// preamble to carry them: a hang's client gets its 200 and then waits.
func TestHeadersFlushedAtTTFB(t *testing.T) {
	for _, f := range Formats {
		t.Run(string(f), func(t *testing.T) {
			r := serve(t, f, seat.Plan{TTFB: 10 * ms, Wait: script.Never, Hang: true})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.origin+f.Path(), strings.NewReader(`{"model":"m","stream":true}`))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err, "no headers before the 5s deadline")
			defer resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.NoError(t, ctx.Err(), "headers came while the plan hangs")
		})
	}
}
