package seat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/rehearse/realtime"
)

// testKey is planted in the environment of every HTTP seat the tests build.
const (
	testKeyEnv = "RETRYGATE_TEST_SEAT_KEY"
	testKey    = "sk-planted-Zq8xVw3Lm9Tn4Kp7Rs2Yb6"
)

func testEnv(name string) string {
	if name == testKeyEnv {
		return testKey
	}
	return ""
}

// loopback starts an httptest server on 127.0.0.1 only.
func loopback(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// newTestSeat builds a seat of kind against base (a server URL; the
// openai and anthropic kinds get /v1 appended, as in a real config).
func newTestSeat(t testing.TB, kind, base string, edit ...func(*Config)) Seat {
	t.Helper()
	cfg := Config{Name: "t", Kind: kind, BaseURL: base, Model: "gpt-4o-mini", APIKeyEnv: testKeyEnv}
	if kind != "ollama" {
		cfg.BaseURL = base + "/v1"
	}
	for _, e := range edit {
		e(&cfg)
	}
	s, err := NewWithOptions(cfg, Options{Getenv: testEnv, Now: func() time.Time { return fixedNow }})
	require.NoError(t, err)
	return s
}

var fixedNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// do makes one attempt under a hard timeout.
func do(t *testing.T, s Seat, hard time.Duration, req Request) Observation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hard)
	defer cancel()
	if req.Prompt == "" {
		req.Prompt = "Say hello in five words."
	}
	return s.Do(ctx, req)
}

// sleepUntil sleeps until t0+d: server-side delays are real, measured
// from when the handler began.
func sleepUntil(t0 time.Time, d time.Duration) {
	if left := d - time.Since(t0); left > 0 {
		time.Sleep(left)
	}
}

// streamWriter writes one wire format's frames and flushes each.
type streamWriter struct {
	w http.ResponseWriter
	f http.Flusher
}

func startStream(w http.ResponseWriter, contentType string) *streamWriter {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	f := w.(http.Flusher)
	f.Flush()
	return &streamWriter{w: w, f: f}
}

func (s *streamWriter) raw(text string) {
	fmt.Fprint(s.w, text)
	s.f.Flush()
}

func (s *streamWriter) data(json string) { s.raw("data: " + json + "\n\n") }

func (s *streamWriter) event(name, json string) {
	s.raw("event: " + name + "\ndata: " + json + "\n\n")
}

func (s *streamWriter) line(json string) { s.raw(json + "\n") }

// oaDelta is an OpenAI chunk with one choice's delta.
func oaDelta(delta string) string {
	return `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}],"usage":null}`
}

func oaText(s string) string { return oaDelta(fmt.Sprintf(`{"content":%q}`, s)) }

func oaUsage(p, c int) string {
	return fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, p, c, p+c)
}

func anText(s string) string {
	return fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, s)
}

func olText(s string) string {
	return fmt.Sprintf(`{"model":"m","created_at":"2030-01-01T00:00:00Z","message":{"role":"assistant","content":%q},"done":false}`, s)
}

// cancelWatch records when handlers saw their request's context end: the
// proof that a cancellation reached the server.
type cancelWatch struct {
	mu sync.Mutex
	at []time.Time
	ch chan time.Time
}

func newCancelWatch() *cancelWatch { return &cancelWatch{ch: make(chan time.Time, 16)} }

// hold blocks the handler until its request is cancelled (or a long
// safety limit passes), recording when.
func (c *cancelWatch) hold(r *http.Request) {
	// Go's server notices a client hanging up only once the request body
	// has been read (as any real model server reads it before answering).
	io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
		now := time.Now()
		c.ch <- now
	case <-time.After(10 * time.Second):
	}
}

func (c *cancelWatch) wait(t testing.TB) time.Time {
	t.Helper()
	select {
	case at := <-c.ch:
		return at
	case <-time.After(3 * time.Second):
		t.Fatal("the server never saw the request cancelled")
	}
	return time.Time{}
}

// logTiming logs one measured-vs-scripted figure in a fixed form so the
// distribution can be collected across runs:
//
//	go test ./rehearse/seat/ -run TestTiming -v -count=5 | grep 'TIMING '
func logTiming(t *testing.T, kind, metric string, want, got time.Duration) {
	t.Helper()
	t.Logf("TIMING kind=%s metric=%s want_ms=%.1f got_ms=%.3f err_ms=%+.3f",
		kind, metric, ms(want), ms(got), ms(got-want))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Timing bounds. A measurement is never early (the client's clock starts
// before the server's, so early means a bug); lateness is scheduling
// noise, and CI machines are shared, so the late bound is generous, and
// RETRYGATE_TIMING_SLACK (realtime.Slack, the one knob every real-time
// test reads) widens every late bound on a machine known to be
// overloaded.
const earlyTol = 5 * time.Millisecond

var (
	// lateTol bounds lateness by what only a hang reaches: on a loaded
	// machine a timer or a read is late by whatever the scheduler makes
	// it, and how late is a benchmark's figure (BenchmarkCutUnderLoad),
	// never a timed test's. The lower bound, earlyTol, is exact.
	lateTol = realtime.Hang()
	// cancelSlack bounds how long after a limit Do returns and the server
	// sees the cancellation by what only a hang reaches: how soon (the
	// issue's 100 ms) is BenchmarkCancellation's, not a timed test's.
	cancelSlack = realtime.Hang()
)

// requireTimed asserts got is within [want-earlyTol, want+lateTol].
func requireTimed(t *testing.T, want, got time.Duration, what string) {
	t.Helper()
	require.GreaterOrEqualf(t, got, want-earlyTol, "%s: got %s, want %s (-%s/+%s)", what, got, want, earlyTol, lateTol)
	require.LessOrEqualf(t, got, want+lateTol, "%s: got %s, want %s (-%s/+%s)", what, got, want, earlyTol, lateTol)
}

// noSecret asserts the planted key appears nowhere in v's printed forms.
func noSecret(t *testing.T, v any) {
	t.Helper()
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		require.NotContains(t, fmt.Sprintf(f, v), testKey)
		require.NotContains(t, fmt.Sprintf(f, v), testKey[3:15])
	}
}

// hasError says whether a JSON object carries a non-null "error" member
// (the reference decoders' test).
func hasError(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}
