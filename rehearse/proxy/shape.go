package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// refusal is an answer the proxy makes itself: a gate refusal, a
// timeout, or a limit. Its body is in the provider's own error shape so
// the official SDKs surface it as their typed API error.
type refusal struct {
	status  int
	code    string // machine word: attempt_cap, deadline, …
	message string
	// reason is the decision on the row of a refusal made before any
	// job's books (a limit, a malformed request): see refuse.
	reason admit.Reason
	// retryAfter is sent only where waiting could help (a breaker's
	// cooldown, the proxy being busy); 0 sends none.
	retryAfter time.Duration
	// final says the proxy has done what the policy allows for the
	// request: the SDKs are told not to retry (x-should-retry: false),
	// which they honour.
	final bool
	// unread: refused before the request's body was read (see unread).
	unread bool
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

// refusalFor is the proxy's own answer to a request whose job has no
// next attempt, on the spend its decision was made on: 504 when the
// deadline is gone (or too little of it is left for the next attempt
// after the wait the retry rules set), else 503 with the reason, unless
// the request's last attempt got no answer from the provider: then 504
// for a timeout (the hard timeout, the wait cap), 502 for a failure of
// the exchange itself; the last attempt's failure is in the message.
// Every such answer is final (x-should-retry: false); a breaker's adds
// the cooldown left as Retry-After, for what it is worth to a caller.
func (c *call) refusalFor(d admit.Decision, spent admit.Spent) refusal {
	p, m := c.p, c.m
	now := p.opts.Now()
	b := p.opts.Policy.Budget
	r := refusal{status: http.StatusServiceUnavailable, code: strings.ReplaceAll(string(d.Reason), " ", "_"), final: true}
	step, stepSet := m.Step()
	why := ""
	switch d.Reason {
	case admit.ReasonDeadline:
		r.status = http.StatusGatewayTimeout
		switch {
		case !now.Before(m.Deadline()):
			why = fmt.Sprintf("the job's %s deadline is gone", b.Deadline)
		case stepSet && step.Retry && step.Delay > 0:
			why = fmt.Sprintf("too little of the job's %s deadline is left after the %s wait its last failure asks",
				b.Deadline, ledgerfile.FormatSeconds(step.Delay)+"s")
		default:
			why = fmt.Sprintf("too little of the job's %s deadline is left for the next attempt", b.Deadline)
		}
	case admit.ReasonAttemptCap:
		why = fmt.Sprintf("the job used %d of %d attempts", spent.Attempts, b.MaxAttempts)
	case admit.ReasonTokenCeiling:
		why = fmt.Sprintf("the job used %d of %d tokens", spent.Tokens, b.TokenCeiling)
	case admit.ReasonSpendCeiling:
		why = fmt.Sprintf("the job spent $%.4f of $%.4f", spent.USD, b.MaxSpendUSD)
	case admit.ReasonQueueWait:
		why = fmt.Sprintf("the seat's last wait is past the %s wait cap", b.MaxWait)
	case admit.ReasonBreakerOpen:
		// The proxy has waited out any wait the retry rules set before
		// deciding: what is left is the cooldown.
		p.mu.Lock()
		r.retryAfter = p.cooldownLeft(c.deps, m.Seat(), now)
		p.mu.Unlock()
		why = "every seat's circuit breaker is open"
	case admit.ReasonPermanentError:
		why = "the last attempt failed for good (identical bytes fail identically)"
	case admit.ReasonRetryLimit:
		why = "the last failure's class has used its retries"
	case admit.ReasonRetryBudget:
		cfg := p.opts.Policy.Retry.Budget
		why = fmt.Sprintf("the retries of every job are over the retry budget (%g of first attempts + %g/s over %s)",
			cfg.Ratio, cfg.MinPerSecond, cfg.Window)
	}
	if o := c.lastObs; o != nil {
		switch {
		case d.Reason == admit.ReasonDeadline:
		case o.Outcome == admit.Timeout || o.Outcome == admit.WaitCap:
			r.status = http.StatusGatewayTimeout
		case o.HTTPStatus < 300:
			r.status = http.StatusBadGateway // the exchange itself failed: no error answer came
		}
		why += fmt.Sprintf("; its last attempt: %s after %s on seat %s", o.Detail, ledgerfile.FormatSeconds(o.Elapsed)+"s", o.Seat)
	}
	r.message = fmt.Sprintf("retrygate: %s for job %s: %s", d.String(), c.id, why)
	return r
}
