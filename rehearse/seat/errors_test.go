package seat

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/retrygate/retrygate/admit"
)

// TestErrorResponses: status and provider error code map to the outcome
// classes of DESIGN.md, in each wire format's error body.
func TestErrorResponses(t *testing.T) {
	tests := []struct {
		name     string
		kind     string
		status   int
		body     string
		delay    time.Duration
		slow5xx  time.Duration
		wantOut  admit.Outcome
		wantCode string
		wantBill admit.Billing
	}{
		{name: "context length", kind: "openai", status: 400,
			body:    `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			wantOut: admit.ClientError, wantCode: "context_length_exceeded", wantBill: admit.Free},
		{name: "insufficient quota is a 429 but permanent", kind: "openai", status: 429,
			body:    `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
			wantOut: admit.ClientError, wantCode: "insufficient_quota", wantBill: admit.Free},
		{name: "rate limited", kind: "openai", status: 429,
			body:    `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			wantOut: admit.RateLimited, wantCode: "rate_limit_exceeded", wantBill: admit.Free},
		{name: "429 without a body", kind: "openai", status: 429, body: ``,
			wantOut: admit.RateLimited, wantBill: admit.Free},
		{name: "content filter", kind: "openai", status: 400,
			body:    `{"error":{"message":"filtered","type":"invalid_request_error","param":"prompt","code":"content_filter"}}`,
			wantOut: admit.ClientError, wantCode: "content_filter", wantBill: admit.Free},
		{name: "numeric code falls back to type", kind: "openai", status: 400,
			body:    `{"error":{"code":400,"message":"bad","type":"invalid_request_error"}}`,
			wantOut: admit.ClientError, wantCode: "invalid_request_error", wantBill: admit.Free},
		{name: "fast 503", kind: "openai", status: 503, body: `upstream unavailable`, slow5xx: time.Second,
			wantOut: admit.ServerError, wantBill: admit.Free},
		{name: "slow 500 is ambiguous", kind: "openai", status: 500, body: `{"error":{"message":"oops","type":"server_error","code":null}}`,
			delay: 120 * time.Millisecond, slow5xx: 100 * time.Millisecond,
			wantOut: admit.ServerError, wantCode: "server_error", wantBill: admit.Ambiguous},
		{name: "anthropic overloaded", kind: "anthropic", status: 529,
			body:    `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			wantOut: admit.ServerError, wantCode: "overloaded_error", wantBill: admit.Free},
		{name: "anthropic rate limit", kind: "anthropic", status: 429,
			body:    `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`,
			wantOut: admit.RateLimited, wantCode: "rate_limit_error", wantBill: admit.Free},
		{name: "anthropic auth", kind: "anthropic", status: 401,
			body:    `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`,
			wantOut: admit.ClientError, wantCode: "authentication_error", wantBill: admit.Free},
		{name: "ollama missing model", kind: "ollama", status: 404, body: `{"error":"model \"x\" not found, try pulling it first"}`,
			wantOut: admit.ClientError, wantBill: admit.Free},
		{name: "redirect is not followed: a wrong base_url is permanent", kind: "openai", status: 307, body: ``,
			wantOut: admit.ClientError, wantBill: admit.Free},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				time.Sleep(tt.delay)
				if tt.status == 307 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			obs := do(t, newTestSeat(t, tt.kind, srv.URL), 2*time.Second, Request{Slow5xxAfter: tt.slow5xx})
			assert.Equal(t, tt.wantOut, obs.Outcome, obs.Detail)
			assert.Equal(t, tt.wantCode, obs.ErrorCode)
			assert.Equal(t, tt.wantBill, obs.Billing)
			assert.Equal(t, tt.status, obs.HTTPStatus)
			assert.True(t, obs.HasWait, "the error body is the answer's first byte")
			assert.Equal(t, obs.Elapsed, obs.Wait)
			assert.Zero(t, obs.Tokens())
			assert.Equal(t, 1, calls, "exactly one request: no hidden retry, no redirect")
		})
	}
}

// TestStreamErrorEvents: an error inside a 200 stream is classified by its
// code (Anthropic's overloaded_error is a server error).
func TestStreamErrorEvents(t *testing.T) {
	tests := []struct {
		name     string
		kind     string
		h        http.HandlerFunc
		wantOut  admit.Outcome
		wantCode string
	}{
		{"anthropic overloaded mid-stream", "anthropic", sseHandler(0,
			"event: message_start\n"+data(`{"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":1}}}`),
			"event: content_block_delta\n"+data(anText("par")),
			"event: error\n"+data(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`),
		), admit.ServerError, "overloaded_error"},
		{"anthropic error before content", "anthropic", sseHandler(0,
			"event: error\n"+data(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`),
		), admit.ServerError, "overloaded_error"},
		{"openai error chunk", "openai", sseHandler(0,
			data(oaDelta(`{"role":"assistant"}`)),
			data(`{"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}}`),
		), admit.ClientError, "context_length_exceeded"},
		{"openai error event", "openai", sseHandler(0,
			"event: error\n"+data(`{"error":{"message":"boom","type":"server_error"}}`),
		), admit.ServerError, "server_error"},
		{"ollama error line", "ollama", func(w http.ResponseWriter, r *http.Request) {
			sw := startStream(w, "application/x-ndjson")
			sw.line(olText("a"))
			sw.line(`{"error":"an error was encountered while running the model"}`)
		}, admit.ServerError, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := loopback(t, tt.h)
			obs := do(t, newTestSeat(t, tt.kind, srv.URL), 2*time.Second, Request{})
			assert.Equal(t, tt.wantOut, obs.Outcome, obs.Detail)
			assert.Equal(t, tt.wantCode, obs.ErrorCode)
			assert.Equal(t, 200, obs.HTTPStatus)
			assert.True(t, obs.HasWait)
		})
	}
}

func TestRetryAfterForms(t *testing.T) {
	tests := []struct {
		name   string
		header map[string]string
		noDate bool
		want   time.Duration
		has    bool
	}{
		{"retry-after-ms", map[string]string{"Retry-After-Ms": "1500"}, false, 1500 * time.Millisecond, true},
		{"retry-after-ms wins over retry-after", map[string]string{"Retry-After-Ms": "250.5", "Retry-After": "9"}, false, 250500 * time.Microsecond, true},
		{"seconds", map[string]string{"Retry-After": "7"}, false, 7 * time.Second, true},
		{"date relative to Date header", map[string]string{
			"Date": "Wed, 21 Oct 2015 07:28:00 GMT", "Retry-After": "Wed, 21 Oct 2015 07:28:30 GMT"}, false, 30 * time.Second, true},
		{"date relative to now without Date", map[string]string{
			"Retry-After": fixedNow.Add(45 * time.Second).Format(http.TimeFormat)}, true, 45 * time.Second, true},
		{"date in the past is zero", map[string]string{
			"Date": "Wed, 21 Oct 2015 07:28:00 GMT", "Retry-After": "Wed, 21 Oct 2015 07:00:00 GMT"}, false, 0, true},
		{"garbage is absent", map[string]string{"Retry-After": "soon"}, false, 0, false},
		{"negative is absent", map[string]string{"Retry-After": "-3"}, false, 0, false},
		{"none", nil, false, 0, false},
		// Issue 12, case 4: past any deadline, yet always a value the log reads back.
		{"1e12 seconds clamps", map[string]string{"Retry-After": "1e12"}, false, admit.MaxDuration, true},
		{"1e15 ms clamps", map[string]string{"Retry-After-Ms": "1e15"}, false, admit.MaxDuration, true},
		{"1e400 clamps", map[string]string{"Retry-After": "1e400"}, false, admit.MaxDuration, true},
		{"year 9999 clamps", map[string]string{
			"Date": "Wed, 21 Oct 2015 07:28:00 GMT", "Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, false, admit.MaxDuration, true},
		{"negative ms is absent", map[string]string{"Retry-After-Ms": "-5"}, false, 0, false},
		{"NaN is absent", map[string]string{"Retry-After": "NaN"}, false, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				if tt.noDate {
					w.Header()["Date"] = nil // suppress the server's automatic Date
				}
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			obs := do(t, newTestSeat(t, "openai", srv.URL), 2*time.Second, Request{})
			assert.Equal(t, admit.RateLimited, obs.Outcome)
			assert.Equal(t, tt.has, obs.HasRetryAfter)
			assert.Equal(t, tt.want, obs.RetryAfter)
		})
	}
}
