package seat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"syscall"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// ending is how an answer ended, as either stopwatch sees it: Do's
// classify from the wire, Resolve from a plan.
type ending struct {
	// cut is what cut the answer off before its end: timeout, wait_cap,
	// cancelled, or reset (the connection lost, a stall).
	cut admit.Outcome
	// errored: an error status, or an error event in a 2xx stream, ended
	// it, with the provider's code when it named one.
	errored bool
	status  int
	code    string
	content bool // content came before the end
	// something: content or usage came (a stream that carried neither
	// and ended is an empty answer, not a cut one).
	something  bool
	incomplete bool // it ended short and said so
	whole      bool // it said it ended (see stream.whole)
}

// settle is the one outcome rule of both stopwatches: an attempt's
// outcome from how its answer ended; its billing, the failure table's,
// except that a failure after content is billable (the server generated
// what it sent, as for a reset); and whether its tokens are charged.
// An answer that carried something and ended without saying so was cut
// short (reset), never ok.
func (e ending) settle(elapsed, slowAfter time.Duration) (o admit.Outcome, b admit.Billing, charged bool) {
	switch {
	case e.cut != "":
		o, charged = e.cut, true
	case e.errored:
		o = admit.ServerError // an error event without a code
		if e.code != "" || e.status < 200 || e.status > 299 {
			o = admit.ClassifyHTTP(e.status, e.code)
		}
		charged = e.content
	case e.incomplete:
		o, charged = admit.Incomplete, true
	case e.whole:
		o, charged = admit.OK, true
	case e.something:
		o, charged = admit.Reset, true
	default:
		o = admit.ServerError
	}
	b = admit.BillingOf(o, elapsed, slowAfter)
	if e.errored && e.content {
		b = admit.Billable
	}
	return o, b, charged
}

// classify settles a 2xx answer that was read to its end or cut off:
// its outcome, billing and detail, from the read's error, the guard's
// cut and what the stream said. It reports whether the attempt's
// tokens are charged, and whether it was cut (its tokens are then an
// estimate where the answer gave no usage).
func (s *httpSeat) classify(parent, ctx context.Context, g *guard, obs *Observation, st *stream, readErr error, slowAfter time.Duration) (charged, cut bool) {
	_, hasCompl := st.usage.completion()
	e := ending{status: obs.HTTPStatus, content: st.content, something: st.content || hasCompl,
		incomplete: st.incomplete, whole: st.whole()}
	switch o, why := g.cancelled(parent, ctx); {
	case readErr != nil && o != "":
		e.cut, obs.Detail = o, why
		if obs.HasWait {
			obs.Detail = why + " mid-stream"
		}
		obs.Elapsed = cutElapsed(g, obs)
	case readErr == bufio.ErrTooLong:
		e.errored, obs.Detail = true, fmt.Sprintf("stream line over %d KiB", MaxLine>>10)
	case readErr == errWholeTooLong:
		e.errored, obs.Detail = true, fmt.Sprintf("json body over %d KiB", MaxLine>>10)
	case readErr != nil && malformedBody(readErr):
		e.errored, obs.Detail = true, "malformed response body"
		obs.Elapsed = cutElapsed(g, obs)
	case readErr != nil:
		e.cut, obs.Detail = admit.Reset, "connection lost mid-stream"
		obs.Elapsed = cutElapsed(g, obs)
	case st.failed:
		obs.ErrorCode = s.clean(st.code)
		e.errored, e.code = true, obs.ErrorCode
		obs.Detail = strings.TrimSpace("error event " + obs.ErrorCode)
		if st.content {
			obs.Detail += " after content"
		}
		if !obs.HasWait && g.answer() {
			// The error is the answer, as for an error status.
			obs.Wait, obs.HasWait = obs.Elapsed, true
		}
	case st.incomplete:
		obs.ErrorCode = s.clean(st.reason)
		obs.Detail = strings.TrimSpace("incomplete " + obs.ErrorCode)
		if !obs.HasWait && g.answer() {
			obs.Wait, obs.HasWait = obs.Elapsed, true // an empty answer is the answer
		}
	case e.whole:
	case e.something:
		obs.Detail = "stream ended before the answer said it ended"
	default:
		obs.Detail = "stream ended without content"
		if st.bad > 0 {
			obs.Detail = fmt.Sprintf("stream ended without content (%d malformed events)", st.bad)
		}
	}
	obs.Outcome, obs.Billing, charged = e.settle(obs.Elapsed, slowAfter)
	return charged, obs.Outcome == admit.Reset || e.cut != ""
}

// cutElapsed is an answer's elapsed when its reading broke off: the
// guard's cut instant when a clock or the context cut it (not when the
// reading goroutine got to run again), else now; never before what was
// already seen.
func cutElapsed(g *guard, obs *Observation) time.Duration {
	el, ok := g.cutInstant()
	if !ok {
		el = time.Since(g.start)
	}
	return max(el, obs.TTFB, obs.Wait)
}

// noAnswer settles an attempt whose round trip failed before the
// response headers were whole. It reports whether the prompt may have
// been read (the request was written and a cut ended it). idle says the
// request went out on a kept-alive connection that gave nothing back.
func (s *httpSeat) noAnswer(parent, ctx context.Context, g *guard, obs *Observation, wrote, idle bool, err error, slowAfter time.Duration) (charged bool) {
	obs.Elapsed = time.Since(g.start)
	if o, why := g.cancelled(parent, ctx); o != "" {
		obs.Elapsed = cutElapsed(g, obs)
		obs.Outcome, obs.Detail = o, why+" before response headers"
		charged = wrote
	} else if !wrote {
		obs.Outcome, obs.Detail = admit.ConnError, dialDetail(err)
	} else if idle && closedIdle(err) {
		// A kept-alive connection the server closed as the request went
		// out on it (the close raced the write): nothing came back, and
		// the failure table's class is the connection's.
		obs.Outcome, obs.Detail = admit.ConnError, "kept-alive connection closed by the server before any answer"
	} else {
		obs.Outcome, obs.Detail = admit.ServerError, answerDetail(err)
	}
	obs.Billing = admit.BillingOf(obs.Outcome, obs.Elapsed, slowAfter)
	return charged
}

// errorResponse reads a non-2xx answer: its status and, from a bounded
// prefix of its body, the provider's error code.
func (s *httpSeat) errorResponse(parent, ctx context.Context, g *guard, obs *Observation, resp *http.Response, body *countingReader, slowAfter time.Duration) {
	// The error body is the answer: its first byte (or its end, when it
	// is empty) is what the wait cap waits for, not the bare headers.
	body.onFirst = func() { g.answer() }
	buf, err := io.ReadAll(io.LimitReader(body, maxErrorBody))
	obs.Bytes = body.n
	obs.Elapsed = max(body.end, obs.TTFB)
	defer func() { obs.Billing = admit.BillingOf(obs.Outcome, obs.Elapsed, slowAfter) }()
	if o, why := g.cancelled(parent, ctx); err != nil && o != "" {
		if body.n > 0 {
			obs.Wait, obs.HasWait = body.first, true
		}
		obs.Elapsed = cutElapsed(g, obs)
		obs.Outcome, obs.Detail = o, fmt.Sprintf("%s reading an http %d body", why, resp.StatusCode)
		return
	}
	if err == nil && !g.answer() {
		// An empty error body ended after the wait cap fired: the cap won.
		obs.Outcome, obs.Detail = admit.WaitCap, "no content within the wait cap"
		return
	}
	if err != nil {
		// The body broke off: the status still classifies the answer.
		obs.Detail = "error body cut short: "
		if malformedBody(err) {
			obs.Detail = "malformed error body: "
		}
	}
	obs.ErrorCode = s.clean(errorCode(buf))
	if tooLong(resp.StatusCode, obs.ErrorCode, buf) {
		obs.ErrorCode = admit.CodeContextLength
	}
	obs.Outcome, _, _ = ending{errored: true, status: resp.StatusCode, code: obs.ErrorCode}.settle(obs.Elapsed, slowAfter)
	obs.Detail = strings.TrimSpace(fmt.Sprintf("%shttp %d %s", obs.Detail, resp.StatusCode, obs.ErrorCode))
	// The error body is the first byte of the answer (as in Resolve).
	obs.Wait, obs.HasWait = obs.Elapsed, true
}

// closedIdle says a request's error is its connection's end (EOF, a
// reset, a broken pipe), not an answer the server began.
func closedIdle(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// malformedBody says a body read failed on the server's framing (a bad
// or over-long chunk-size line), not on the connection.
func malformedBody(err error) bool {
	if errors.Is(err, httputil.ErrLineTooLong) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "chunk") || strings.Contains(msg, "malformed")
}

// mediaType is a Content-Type's media type, lower-cased, without its
// parameters: what mime.ParseMediaType returns for it, or for a malformed
// one the same words, without parsing parameters nobody reads.
func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// streamType says whether a 200's content type is read as a stream. A
// missing or text/plain type is read anyway (some compatible servers
// send those); anything else (an HTML page from a proxy, say) is a
// server_error without reading the body.
func streamType(mt string, ndjson bool) bool {
	switch mt {
	case "", "text/plain":
		return true
	case "text/event-stream":
		return !ndjson
	case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/json":
		return ndjson
	}
	return false
}

// clean admits a server-supplied word (an error code, a content type)
// into the observation only if it looks like one: short, plain
// characters, and holding no part of the seat's key even when the server
// echoes it back.
func (s *httpSeat) clean(v string) string {
	if v == "" || len(v) > 64 {
		return ""
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:/+", r)) {
			return ""
		}
	}
	// Case-insensitive: media types come back lower-cased, and a proxy
	// may upper-case an echoed key.
	if lk, lv := strings.ToLower(s.key), strings.ToLower(v); s.key != "" && (strings.Contains(lv, lk) || len(v) >= 8 && strings.Contains(lk, lv)) {
		return ""
	}
	return v
}

// tooLong reports whether a client error's body says the prompt is
// longer than the seat's context window in words rather than by
// OpenAI's code: Anthropic's "prompt is too long", vLLM's "maximum
// context length", llama.cpp's "exceeds the available context size". The
// row then carries context_length_exceeded, so the policy can send the
// job to a seat with a larger window (seats.*.context_window).
func tooLong(status int, code string, body []byte) bool {
	if admit.ContextLength(code) || status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge && status != http.StatusUnprocessableEntity {
		return false
	}
	switch code {
	case "", "invalid_request_error", "BadRequestError", "invalid_request", "INVALID_ARGUMENT":
	default:
		return false // a code of its own says what it is
	}
	var v struct {
		Message string `json:"message"`
		Error   struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil {
		var e struct {
			Error string `json:"error"` // Ollama's
		}
		if json.Unmarshal(body, &e) != nil {
			return false
		}
		v.Message = e.Error
	}
	m := strings.ToLower(v.Message + " " + v.Error.Message)
	for _, w := range [...]string{"context length", "context_length", "maximum context", "context window", "context size", "prompt is too long", "input is too long", "too many tokens in the prompt"} {
		if strings.Contains(m, w) {
			return true
		}
	}
	return false
}

// errorCode finds the provider's error code in an error body or event:
// {"error":{"code":"…","type":"…"}} (OpenAI: code, else type) or
// {"type":"error","error":{"type":"…"}} (Anthropic). A string error
// (Ollama) or anything else has no code.
func errorCode(body []byte) string {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '[' {
		// Google's APIs (Gemini's OpenAI-compatible endpoint among them)
		// may wrap the error object in a one-element list.
		var list []json.RawMessage
		if json.Unmarshal(b, &list) != nil || len(list) != 1 {
			return ""
		}
		body = list[0]
	}
	if json.Unmarshal(body, &v) != nil || len(v.Error) == 0 || v.Error[0] != '{' {
		return ""
	}
	var e struct {
		Code    json.RawMessage `json:"code"`
		Type    json.RawMessage `json:"type"`
		Status  json.RawMessage `json:"status"` // Google's: RESOURCE_EXHAUSTED
		Details []struct {
			Type       string `json:"@type"`
			Violations []struct {
				QuotaID string `json:"quotaId"`
			} `json:"violations"`
		} `json:"details"`
	}
	if json.Unmarshal(v.Error, &e) != nil {
		return ""
	}
	// A Google quota failure on a daily quota names it: its id (e.g.
	// GenerateRequestsPerDayPerProjectPerModel-FreeTier) is the code, a
	// permanent one (admit.ClassifyHTTP), since no retry within a job
	// outlasts a day.
	for _, d := range e.Details {
		if strings.HasSuffix(d.Type, "google.rpc.QuotaFailure") {
			for _, q := range d.Violations {
				if admit.DailyQuota(q.QuotaID) {
					return q.QuotaID
				}
			}
		}
	}
	for _, raw := range []json.RawMessage{e.Code, e.Type, e.Status} {
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return s
		}
	}
	return ""
}
