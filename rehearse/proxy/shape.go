package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// refusal is an answer the proxy makes itself: a gate refusal, a
// timeout, or a limit. Its body is in the provider's own error shape so
// the official SDKs surface it as their typed API error.
type refusal struct {
	status  int
	code    string // machine word: attempt_cap, deadline, …
	message string
	// retryAfter is sent only where waiting could help (a breaker's
	// cooldown, the proxy being busy); 0 sends none.
	retryAfter time.Duration
	// final says no retry of this job can be admitted: the SDKs are told
	// not to retry (x-should-retry: false), which they honour.
	final bool
	// noJob: refused before any job was opened (the job table is full):
	// its line in the log is an event, not a row (see logRequest).
	noJob bool
}

// write sends r in kind's error shape:
//
//	openai:    {"error":{"message":…,"type":…,"code":…}}
//	anthropic: {"type":"error","error":{"type":…,"message":…}}
//	ollama:    {"error":…}
func (r refusal) write(w http.ResponseWriter, kind string) {
	var body any
	switch kind {
	case "anthropic":
		body = map[string]any{"type": "error", "error": map[string]any{"type": anthropicType(r.status), "message": r.message}}
	case "ollama":
		body = map[string]any{"error": r.message}
	default:
		body = map[string]any{"error": map[string]any{"message": r.message, "type": openaiType(r.status), "code": r.code}}
	}
	b, _ := json.Marshal(body) // strings only: cannot fail
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Retrygate-Refused", r.code)
	if r.retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((r.retryAfter+time.Second-1)/time.Second), 10))
	}
	if r.final {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(b)
}

func openaiType(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge, http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed:
		return "invalid_request_error"
	case http.StatusGatewayTimeout:
		return "timeout"
	}
	return "retrygate_refused"
}

func anthropicType(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusBadRequest, http.StatusMethodNotAllowed:
		return "invalid_request_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case http.StatusBadGateway:
		return "api_error"
	}
	return "retrygate_refused"
}
