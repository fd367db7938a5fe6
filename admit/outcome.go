package admit

import (
	"fmt"
	"strings"
	"time"
)

// Outcome is an attempt's failure class (seed 004's table).
type Outcome string

const (
	OK          Outcome = "ok"
	ConnError   Outcome = "conn_error"   // DNS, refused, TLS: nothing reached the provider
	RateLimited Outcome = "rate_limited" // 429
	ClientError Outcome = "client_error" // 400/401/403/404/422, context length, content policy, quota
	ServerError Outcome = "server_error" // 5xx, fast or slow
	Timeout     Outcome = "timeout"      // the hard timeout fired and cancelled the request
	WaitCap     Outcome = "wait_cap"     // no first byte within the wait cap; cancelled
	Reset       Outcome = "reset"        // connection lost mid-stream
	Cancelled   Outcome = "cancelled"    // the operator stopped the run (Ctrl-C)
	// Incomplete is an answer the provider ended short and said so (the
	// Responses API's status incomplete: max_output_tokens,
	// content_filter): billed for what it generated, and never retried,
	// since identical bytes end the same way.
	Incomplete Outcome = "incomplete"
)

// Outcomes lists every outcome class in a stable order; a class added
// later goes last.
var Outcomes = []Outcome{OK, ConnError, RateLimited, ClientError, ServerError, Timeout, WaitCap, Reset, Cancelled, Incomplete}

// ParseOutcome accepts exactly one of the outcome class names.
func ParseOutcome(s string) (Outcome, error) {
	for _, o := range Outcomes {
		if string(o) == s {
			return o, nil
		}
	}
	return "", fmt.Errorf("unknown outcome %q (want one of ok, conn_error, rate_limited, client_error, server_error, timeout, wait_cap, reset, cancelled, incomplete)", s)
}

// SeatFailure says whether an outcome counts against its seat's circuit
// breaker: a failure of the seat, not of the request (a client error)
// nor an answer ended short by the request's own cap (incomplete).
// Cancelled says nothing of the seat and is not recorded at all.
func (o Outcome) SeatFailure() bool { return o != OK && o != ClientError && o != Incomplete }

// Billing says whether an attempt likely cost money.
type Billing string

const (
	Billable  Billing = "billable"
	Free      Billing = "free"
	Ambiguous Billing = "ambiguous"
)

// BillingOf classifies an attempt's cost. A 5xx that came back after
// slowAfter may have been generated in full, so it is ambiguous; a fast
// one probably cost nothing. slowAfter <= 0 treats every 5xx as fast.
func BillingOf(o Outcome, elapsed, slowAfter time.Duration) Billing {
	switch o {
	case OK, Reset, Incomplete:
		return Billable
	case ServerError:
		if slowAfter > 0 && elapsed >= slowAfter {
			return Ambiguous
		}
		return Free
	case Timeout, WaitCap, Cancelled:
		return Ambiguous
	default: // conn_error, rate_limited, client_error
		return Free
	}
}

// Billed reports whether a billing class counts as paid; ambiguous is
// counted as billed everywhere in retrygate (seed 004: assume the
// pessimistic case, reconcile later).
func (b Billing) Billed() bool { return b == Billable || b == Ambiguous }

// Permanent error codes: identical bytes will fail identically.
var permanentCodes = map[string]bool{
	CodeContextLength:           true,
	"exceed_context_size_error": true,
	"content_filter":            true,
	"content_policy_violation":  true,
	"insufficient_quota":        true,
	"invalid_request_error":     true,
	"authentication_error":      true,
	"permission_error":          true,
	"not_found_error":           true,
	"invalid_api_key":           true,
	"model_not_found":           true,
	// The Responses API's failed responses name the request's fault by
	// these codes (server_error and rate_limit_exceeded are transient,
	// and a code not listed is taken as the server's).
	"invalid_prompt":                 true,
	"bio_policy":                     true,
	"misalignment_policy_violation":  true,
	"data_residency_mismatch":        true,
	"invalid_image":                  true,
	"invalid_image_format":           true,
	"invalid_base64_image":           true,
	"invalid_image_url":              true,
	"image_too_large":                true,
	"image_too_small":                true,
	"image_parse_error":              true,
	"image_content_policy_violation": true,
	"invalid_image_mode":             true,
	"image_file_too_large":           true,
	"unsupported_image_media_type":   true,
	"empty_image_file":               true,
	"image_file_not_found":           true,
}

// ContextLength reports whether code says the prompt did not fit the
// seat's context window (OpenAI's context_length_exceeded, llama.cpp's
// exceed_context_size_error; a seat names other servers' wordings so):
// a permanent error on that seat, which a seat with a larger window may
// answer.
func ContextLength(code string) bool {
	return code == CodeContextLength || code == "exceed_context_size_error"
}

// CodeContextLength is the error code of a prompt longer than the seat's
// context window.
const CodeContextLength = "context_length_exceeded"

// DailyQuota reports whether code names a quota that resets once a day
// (Google's quota ids: GenerateRequestsPerDayPerProjectPerModel-FreeTier):
// a permanent error, since no retry within a job outlasts it.
func DailyQuota(code string) bool { return strings.Contains(code, "PerDay") }

// ClassifyHTTP maps a completed HTTP exchange to an outcome class. code is
// the provider's error code or type when the body named one. Provider
// codes win over the status: Anthropic's overloaded_error is a server
// error even when it arrives inside a 200 stream, and an OpenAI
// insufficient_quota arrives as a 429 but no retry will add quota.
func ClassifyHTTP(status int, code string) Outcome {
	switch code {
	case "overloaded_error", "api_error", "server_error":
		return ServerError
	case "rate_limit_error", "rate_limit_exceeded", "RESOURCE_EXHAUSTED":
		return RateLimited
	}
	if permanentCodes[code] || DailyQuota(code) {
		return ClientError
	}
	switch {
	case status == 429:
		return RateLimited
	case status == 408:
		return ServerError // a request timeout the server owns: transient
	case status >= 500:
		return ServerError
	case status >= 400:
		return ClientError
	case status >= 200 && status < 300 && code != "":
		return ServerError // an error event inside a 2xx stream
	case status >= 200 && status < 300:
		return OK
	}
	// A 3xx: seats follow no redirects, so this is a wrong base_url, and
	// identical bytes will be redirected identically.
	if status >= 300 && status < 400 {
		return ClientError
	}
	return ServerError // 1xx where a body was expected
}
