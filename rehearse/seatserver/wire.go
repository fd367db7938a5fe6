package seatserver

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// chatRequest is the little of a request body the server looks at. The
// prompt is never read into anything, let alone logged.
type chatRequest struct {
	Model         string `json:"model"`
	Stream        *bool  `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// usage is the plan's tokens as a response reports them: each part
// written where the plan reports it and the wire has a field for it
// (docs/log.md maps them); ok is false when the response must carry no
// usage at all. Plan.Incomplete is why the answer ends short: the
// Responses API says so outright; the other APIs give their own stop
// reason (stopReason).
type usage struct {
	seat.Plan
	ok bool
}

// stopReason is the API's own word for why an answer ended: what it says
// on a whole answer (done), at its cap, or when a filter stopped it.
func stopReason(u usage, done, capped, filtered string) string {
	switch u.Incomplete {
	case "":
		return done
	case "content_filter":
		return filtered
	}
	return capped
}

// wire renders one response in one format. Every method returns the bytes
// to write; the player owns timing and flushing.
type wire interface {
	// preamble goes out with the headers of a streamed 200: the role-only
	// chunk, or message_start and friends. None of it is content.
	preamble(u usage) []byte
	content(text string) []byte
	finish(u usage) []byte
	// streamError is an error inside a 200 stream (Anthropic's error event).
	streamError(code string) []byte
	whole(text string, u usage) []byte
}

// newWire is the wire of one request to format f; responses says it came
// to an openai server's /v1/responses.
func newWire(f Format, responses bool, req chatRequest, index int, now func() time.Time) wire {
	b := base{model: cmp.Or(req.Model, "retrygate-seat"), index: index, now: now(), clock: now}
	switch {
	case responses:
		return &responsesWire{base: b}
	case f == Anthropic:
		return &anthropicWire{base: b}
	case f == Ollama:
		return &ollamaWire{base: b}
	default:
		return &openaiWire{base: b, includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	}
}

// streaming reports whether the request asked for a stream, with each
// API's own default: OpenAI and Anthropic answer whole unless asked,
// Ollama streams unless told not to.
func streaming(f Format, req chatRequest) bool {
	if req.Stream != nil {
		return *req.Stream
	}
	return f == Ollama
}

type base struct {
	model string
	index int
	now   time.Time        // when the request came: OpenAI's created, the same on every chunk
	clock func() time.Time // Ollama stamps each line as it goes out
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own maps and structs of strings and numbers get here.
		panic(fmt.Sprintf("seatserver: marshal: %v", err))
	}
	return b
}

func sse(event string, v any) []byte {
	data := "data: " + string(mustJSON(v)) + "\n\n"
	if event != "" {
		data = "event: " + event + "\n" + data
	}
	return []byte(data)
}

func errorMessage(status int, code string) string {
	switch {
	case code != "" && status != http.StatusOK:
		return fmt.Sprintf("scripted error %d %s", status, code)
	case code != "":
		return "scripted error " + code
	default:
		return fmt.Sprintf("scripted error %d %s", status, http.StatusText(status))
	}
}

// --- OpenAI chat completions ---

type openaiWire struct {
	base
	includeUsage bool
}

func (w *openaiWire) id() string { return fmt.Sprintf("chatcmpl-retrygate%d", w.index) }

// chunk is one chat.completion.chunk: its one choice with delta, or, with
// a nil delta, no choices (the usage chunk).
func (w *openaiWire) chunk(delta map[string]any, finish, u any) []byte {
	choices := []any{}
	if delta != nil {
		choices = []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}
	}
	m := map[string]any{
		"id":                 w.id(),
		"object":             "chat.completion.chunk",
		"created":            w.now.Unix(),
		"model":              w.model,
		"system_fingerprint": "fp_retrygate",
		"choices":            choices,
	}
	if w.includeUsage {
		// With include_usage every chunk carries usage, null until the last.
		m["usage"] = u
	}
	return sse("", m)
}

func (w *openaiWire) preamble(usage) []byte {
	return w.chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil, nil)
}

func (w *openaiWire) content(text string) []byte {
	return w.chunk(map[string]any{"content": text}, nil, nil)
}

// openaiUsage is Chat Completions' usage: cached input is inside
// prompt_tokens, reasoning inside completion_tokens; it has no field for
// cache writes (OpenAI bills none).
func openaiUsage(u usage) map[string]any {
	m := map[string]any{
		"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.PromptTokens + u.CompletionTokens,
	}
	if u.HasCached {
		m["prompt_tokens_details"] = map[string]any{"cached_tokens": u.CachedTokens, "audio_tokens": 0}
	}
	if u.HasReasoning {
		m["completion_tokens_details"] = map[string]any{"reasoning_tokens": u.ReasoningTokens, "audio_tokens": 0,
			"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
	}
	return m
}

// anthropicInput is the Messages API's input side: the cache fields sit
// beside input_tokens, which holds only the rest of the prompt.
func anthropicInput(m map[string]any, u usage) map[string]any {
	m["input_tokens"] = u.PromptTokens
	if u.HasCached || u.HasCacheWrite {
		m["input_tokens"] = u.PromptTokens - u.CachedTokens - u.CacheWriteTokens
		m["cache_creation_input_tokens"] = u.CacheWriteTokens
		m["cache_read_input_tokens"] = u.CachedTokens
	}
	return m
}

func (w *openaiWire) finish(u usage) []byte {
	out := w.chunk(map[string]any{}, stopReason(u, "stop", "length", "content_filter"), nil)
	if w.includeUsage && u.ok {
		out = append(out, w.chunk(nil, nil, openaiUsage(u))...)
	}
	return append(out, "data: [DONE]\n\n"...)
}

func openaiErrorType(status int, code string) string {
	switch {
	case code == "insufficient_quota":
		return "insufficient_quota"
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500 || status == http.StatusOK:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

func (w *openaiWire) streamError(code string) []byte {
	return sse("", errorValue(OpenAI, http.StatusOK, code, ""))
}

func (w *openaiWire) whole(text string, u usage) []byte {
	m := map[string]any{
		"id": w.id(), "object": "chat.completion", "created": w.now.Unix(), "model": w.model,
		"system_fingerprint": "fp_retrygate",
		"choices": []any{map[string]any{
			"index": 0, "message": map[string]any{"role": "assistant", "content": text, "refusal": nil},
			"logprobs": nil, "finish_reason": stopReason(u, "stop", "length", "content_filter"),
		}},
	}
	if u.ok {
		m["usage"] = openaiUsage(u)
	}
	return append(mustJSON(m), '\n')
}

// --- Anthropic messages ---

type anthropicWire struct{ base }

func (w *anthropicWire) id() string { return fmt.Sprintf("msg_retrygate%d", w.index) }

func (w *anthropicWire) preamble(u usage) []byte {
	msg := map[string]any{
		"id": w.id(), "type": "message", "role": "assistant", "content": []any{}, "model": w.model,
		"stop_reason": nil, "stop_sequence": nil,
	}
	if u.ok {
		// The real API reports a token or so of output already at message_start;
		// message_delta's count is cumulative and replaces it.
		msg["usage"] = anthropicInput(map[string]any{"output_tokens": min(u.CompletionTokens, 1)}, u)
	}
	out := sse("message_start", map[string]any{"type": "message_start", "message": msg})
	out = append(out, sse("content_block_start", map[string]any{
		"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""},
	})...)
	return append(out, sse("ping", map[string]any{"type": "ping"})...)
}

func (w *anthropicWire) content(text string) []byte {
	return sse("content_block_delta", map[string]any{
		"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": text},
	})
}

func (w *anthropicWire) finish(u usage) []byte {
	out := sse("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	delta := map[string]any{
		"type": "message_delta", "delta": map[string]any{"stop_reason": stopReason(u, "end_turn", "max_tokens", "refusal"), "stop_sequence": nil},
	}
	if u.ok {
		delta["usage"] = map[string]any{"output_tokens": u.CompletionTokens}
	}
	out = append(out, sse("message_delta", delta)...)
	return append(out, sse("message_stop", map[string]any{"type": "message_stop"})...)
}

// anthropicTypes are the Messages API's error types by status; another
// 5xx is api_error, another 4xx invalid_request_error.
var anthropicTypes = map[int]string{
	400: "invalid_request_error", 401: "authentication_error", 402: "billing_error", 403: "permission_error",
	404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 504: "timeout_error", 529: "overloaded_error",
}

func anthropicErrorType(status int, code string) string {
	if code != "" {
		return code
	}
	if t, ok := anthropicTypes[status]; ok {
		return t
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func (w *anthropicWire) streamError(code string) []byte {
	if code == "" {
		code = "api_error"
	}
	return sse("error", errorValue(Anthropic, http.StatusOK, code, ""))
}

func (w *anthropicWire) whole(text string, u usage) []byte {
	m := map[string]any{
		"id": w.id(), "type": "message", "role": "assistant", "model": w.model,
		"content":     []any{map[string]any{"type": "text", "text": text}},
		"stop_reason": stopReason(u, "end_turn", "max_tokens", "refusal"), "stop_sequence": nil,
	}
	if u.ok {
		m["usage"] = anthropicInput(map[string]any{"output_tokens": u.CompletionTokens}, u)
	}
	return append(mustJSON(m), '\n')
}

// --- Ollama /api/chat ---

type ollamaWire struct{ base }

func (w *ollamaWire) line(v any) []byte { return append(mustJSON(v), '\n') }

func (w *ollamaWire) created() string { return w.clock().UTC().Format(time.RFC3339Nano) }

func (w *ollamaWire) preamble(usage) []byte { return nil } // Ollama has no role-only line

func (w *ollamaWire) content(text string) []byte {
	return w.line(map[string]any{
		"model": w.model, "created_at": w.created(),
		"message": map[string]any{"role": "assistant", "content": text}, "done": false,
	})
}

func (w *ollamaWire) final(text string, u usage) map[string]any {
	m := map[string]any{
		"model": w.model, "created_at": w.created(),
		"message": map[string]any{"role": "assistant", "content": text},
		"done":    true, "done_reason": stopReason(u, "stop", "length", "stop"),
	}
	if u.ok {
		m["prompt_eval_count"] = u.PromptTokens
		m["eval_count"] = u.CompletionTokens
	}
	return m
}

func (w *ollamaWire) finish(u usage) []byte { return w.line(w.final("", u)) }

func (w *ollamaWire) streamError(code string) []byte {
	return w.line(errorValue(Ollama, http.StatusOK, code, ""))
}

func (w *ollamaWire) whole(text string, u usage) []byte { return w.line(w.final(text, u)) }

// errorValue is an error in the format's own shape: OpenAI's {error:
// {message, type, param, code}}, Anthropic's {type: error, error: {type,
// message}}, Ollama's {error}. msg "" is the scripted error's message.
func errorValue(f Format, status int, code, msg string) map[string]any {
	if msg == "" {
		msg = errorMessage(status, code)
	}
	switch f {
	case Anthropic:
		return map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(status, code), "message": msg}}
	case Ollama:
		return map[string]any{"error": msg}
	}
	var c any
	switch {
	case code != "":
		c = code
	case status == http.StatusTooManyRequests:
		// OpenAI's own 429s always name it; other errors often carry null.
		c = "rate_limit_exceeded"
	}
	return map[string]any{"error": map[string]any{"message": msg, "type": openaiErrorType(status, code), "param": nil, "code": c}}
}

// errorBody is a whole error response: a scripted one (msg "") or the
// server's own 4xx.
func errorBody(f Format, status int, code, msg string) []byte {
	return append(mustJSON(errorValue(f, status, code, msg)), '\n')
}

// --- OpenAI Responses API ---

// responsesWire is the Responses API (POST /v1/responses) on an openai
// seat server: typed events with a sequence_number, no [DONE]. It keeps
// the text it has sent, for the terminal event's whole Response.
type responsesWire struct {
	base
	seq  int
	text strings.Builder
}

func (w *responsesWire) id() string { return responseID(w.index) }

// responseID is the id of request index's Response, which GET
// /v1/responses/{id} reads back.
func responseID(index int) string { return fmt.Sprintf("resp_retrygate%d", index) }

func (w *responsesWire) itemID() string { return fmt.Sprintf("msg_retrygate%d", w.index) }

func (w *responsesWire) event(typ string, fields map[string]any) []byte {
	fields["type"] = typ
	fields["sequence_number"] = w.seq
	w.seq++
	return sse(typ, fields)
}

// responsesUsage is the Responses API's usage: cached and cache-written
// input are inside input_tokens, reasoning inside output_tokens; each
// detail is written where the plan reports it.
func responsesUsage(u usage) any {
	if !u.ok {
		return nil
	}
	m := map[string]any{"input_tokens": u.PromptTokens, "output_tokens": u.CompletionTokens, "total_tokens": u.PromptTokens + u.CompletionTokens}
	in := map[string]any{}
	if u.HasCached {
		in["cached_tokens"] = u.CachedTokens
	}
	if u.HasCacheWrite {
		in["cache_write_tokens"] = u.CacheWriteTokens
	}
	if len(in) > 0 {
		m["input_tokens_details"] = in
	}
	if u.HasReasoning {
		m["output_tokens_details"] = map[string]any{"reasoning_tokens": u.ReasoningTokens}
	}
	return m
}

// message is the output message holding text, in state status.
func (w *responsesWire) message(status, text string) map[string]any {
	content := []any{}
	if status != "in_progress" {
		content = []any{w.part(text)}
	}
	return map[string]any{"id": w.itemID(), "type": "message", "status": status, "role": "assistant", "content": content}
}

func (w *responsesWire) part(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// response is the Response object in state status, with output and
// usage once there are any.
func (w *responsesWire) response(status string, output []any, u any, e any) map[string]any {
	return map[string]any{
		"id": w.id(), "object": "response", "created_at": w.now.Unix(), "status": status,
		"model": w.model, "output": output, "usage": u, "error": e, "incomplete_details": nil,
		"instructions": nil, "max_output_tokens": nil, "metadata": map[string]any{},
		"parallel_tool_calls": true, "previous_response_id": nil, "temperature": 1.0, "top_p": 1.0,
		"text": map[string]any{"format": map[string]any{"type": "text"}}, "tool_choice": "auto",
		"tools": []any{}, "truncation": "disabled", "store": false,
	}
}

// preamble is response.created, response.in_progress and the message's
// output_item.added and content_part.added: none of it text.
func (w *responsesWire) preamble(usage) []byte {
	out := w.event("response.created", map[string]any{"response": w.response("in_progress", []any{}, nil, nil)})
	out = append(out, w.event("response.in_progress", map[string]any{"response": w.response("in_progress", []any{}, nil, nil)})...)
	out = append(out, w.event("response.output_item.added", map[string]any{"output_index": 0, "item": w.message("in_progress", "")})...)
	return append(out, w.event("response.content_part.added", map[string]any{
		"item_id": w.itemID(), "output_index": 0, "content_index": 0, "part": w.part(""),
	})...)
}

func (w *responsesWire) content(text string) []byte {
	w.text.WriteString(text)
	return w.event("response.output_text.delta", map[string]any{
		"item_id": w.itemID(), "output_index": 0, "content_index": 0, "delta": text, "logprobs": []any{},
	})
}

// finish closes the text, its part and its item, and ends the stream
// with response.completed, whose Response holds the whole output.
func (w *responsesWire) finish(u usage) []byte {
	text := w.text.String()
	out := w.event("response.output_text.done", map[string]any{
		"item_id": w.itemID(), "output_index": 0, "content_index": 0, "text": text, "logprobs": []any{},
	})
	out = append(out, w.event("response.content_part.done", map[string]any{
		"item_id": w.itemID(), "output_index": 0, "content_index": 0, "part": w.part(text),
	})...)
	status := "completed"
	if u.Incomplete != "" {
		status = "incomplete"
	}
	out = append(out, w.event("response.output_item.done", map[string]any{"output_index": 0, "item": w.message(status, text)})...)
	return append(out, w.event("response."+status, map[string]any{"response": w.final(text, u)})...)
}

// final is the finished Response: completed, or incomplete with its
// reason (incomplete_details.reason).
func (w *responsesWire) final(text string, u usage) map[string]any {
	if u.Incomplete == "" {
		return w.response("completed", []any{w.message("completed", text)}, responsesUsage(u), nil)
	}
	r := w.response("incomplete", []any{w.message("incomplete", text)}, responsesUsage(u), nil)
	r["incomplete_details"] = map[string]any{"reason": u.Incomplete}
	return r
}

// streamError is a failed response: response.failed, whose error names
// the code (server_error when the plan names none).
func (w *responsesWire) streamError(code string) []byte {
	if code == "" {
		code = "server_error"
	}
	e := map[string]any{"code": code, "message": errorMessage(http.StatusOK, code)}
	return w.event("response.failed", map[string]any{"response": w.response("failed", []any{}, nil, e)})
}

func (w *responsesWire) whole(text string, u usage) []byte {
	return append(mustJSON(w.final(text, u)), '\n')
}

// rateLimitHeaders writes a plan's rate-limit state in the format's own
// headers: OpenAI's x-ratelimit-* with Go durations, Anthropic's
// anthropic-ratelimit-* with RFC 3339 times after the Date header it
// sets (whole seconds, so a client measuring from it reads the plan's
// reset exactly). The reset goes on both limits; Ollama has none.
func rateLimitHeaders(h http.Header, f Format, rl admit.RateLimit, now time.Time) {
	if !rl.Any() {
		return
	}
	count := func(n int64) string { return strconv.FormatInt(n, 10) }
	switch f {
	case OpenAI:
		if rl.HasRequests {
			h.Set("x-ratelimit-remaining-requests", count(rl.RemainingRequests))
		}
		if rl.HasTokens {
			h.Set("x-ratelimit-remaining-tokens", count(rl.RemainingTokens))
		}
		if rl.HasReset {
			h.Set("x-ratelimit-reset-requests", rl.Reset.String())
			h.Set("x-ratelimit-reset-tokens", rl.Reset.String())
		}
	case Anthropic:
		date := now.UTC().Truncate(time.Second)
		h.Set("Date", date.Format(http.TimeFormat))
		if rl.HasRequests {
			h.Set("anthropic-ratelimit-requests-remaining", count(rl.RemainingRequests))
		}
		if rl.HasTokens {
			h.Set("anthropic-ratelimit-tokens-remaining", count(rl.RemainingTokens))
		}
		if rl.HasReset {
			at := date.Add(rl.Reset).Format(time.RFC3339Nano)
			h.Set("anthropic-ratelimit-requests-reset", at)
			h.Set("anthropic-ratelimit-tokens-reset", at)
		}
	}
}
