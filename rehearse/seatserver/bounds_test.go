package seatserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/rehearse/realtime"
	"github.com/retrygate/retrygate/rehearse/seat"
)

var quickPlan = seat.Plan{Elapsed: time.Millisecond, PromptTokens: 1, CompletionTokens: 1}

// TestRequestRecordsAreARing (issue 12, case 9): the server keeps the
// last Keep records, however many requests come, and still counts them all.
func TestRequestRecordsAreARing(t *testing.T) {
	srv, err := New(Options{Planner: plans{quickPlan}, Format: OpenAI, Keep: 5})
	require.NoError(t, err)
	r := serveWith(t, srv)
	for i := 0; i < 12; i++ {
		resp, err := http.Post(r.baseURL(OpenAI)+"/chat/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"model":"m","stream":false,"n":%d}`, i)))
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	recs := srv.Requests()
	require.Len(t, recs, 5)
	for i, rec := range recs {
		assert.Equal(t, 7+i, rec.Index, "the last five, oldest first")
	}
	assert.Equal(t, 12, srv.Total())

	resp, err := http.Get(r.origin + RequestsPath)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body RequestsResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, 12, body.Total)
	assert.Equal(t, 5, body.Kept)
	assert.Len(t, body.Requests, 5)
}

// TestSlowBodyGets408 (issue 12, case 9): a client that sends headers and
// then dribbles its body is answered 408 once BodyTimeout passes, and its
// connection is closed, instead of being held open for ever.
func TestSlowBodyGets408(t *testing.T) {
	srv, err := New(Options{Planner: plans{quickPlan}, Format: OpenAI, BodyTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	r := serveWith(t, srv)
	c, err := net.Dial("tcp", r.addr.String())
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"mo")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	got, _ := io.ReadAll(c) // until the server closes
	took := time.Since(start)
	assert.Contains(t, string(got), "HTTP/1.1 408")
	assert.Contains(t, string(got), "request body not received within 200ms")
	// Held open, it would run to the 5 s read deadline; a ceiling only
	// that reaches (realtime).
	assert.Less(t, took, realtime.By(200*time.Millisecond), "closed, not held open")
	recs := srv.Requests()
	require.Len(t, recs, 1)
	assert.Equal(t, StateRejected, recs[0].State)
}

// TestBigBodyGets413: a body over MaxBody is refused with a message that
// says so.
func TestBigBodyGets413(t *testing.T) {
	srv, err := New(Options{Planner: plans{quickPlan}, Format: OpenAI, MaxBody: 1 << 10})
	require.NoError(t, err)
	r := serveWith(t, srv)
	resp, err := http.Post(r.baseURL(OpenAI)+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+strings.Repeat("m", 4<<10)+`"}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	assert.Contains(t, string(b), "request body over 1024 bytes")
}
