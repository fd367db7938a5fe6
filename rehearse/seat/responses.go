package seat

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/buger/jsonparser"
)

// responsesWire speaks OpenAI's Responses API: POST {base_url}/responses
// with stream: true, reading its typed events (response.created …
// response.output_text.delta … response.completed), each with a
// sequence_number. There is no [DONE]: the stream ends after its terminal
// event, response.completed, response.incomplete or response.failed (or
// an error event). The base URL, key, headers both ways and error bodies
// are Chat Completions' (an openai seat with api: responses): what
// responsesWire does not define is openaiWire's.
type responsesWire struct{ openaiWire }

type responsesRequest struct {
	Model           string    `json:"model"`
	Input           []Message `json:"input"`
	Stream          bool      `json:"stream"`
	MaxOutputTokens int       `json:"max_output_tokens,omitempty"`
}

func (responsesWire) path() string { return "/responses" }

// body sends the chat as input messages ({role, content}: system,
// developer, user and assistant are all roles the API takes there).
// Usage comes with the terminal event unasked.
func (responsesWire) body(model string, req Request) []byte {
	r := responsesRequest{Model: model, Input: req.chat(), Stream: true}
	if req.MaxTokens > 0 {
		r.MaxOutputTokens = req.MaxTokens
	}
	b, _ := json.Marshal(r) // plain strings and ints: cannot fail
	return b
}

// responsesDeltas are the events whose delta is generated text: the
// answer, a refusal, reasoning (its summary, or the raw text some
// servers stream) and tool-call arguments.
var responsesDeltas = map[string]bool{
	"response.output_text.delta":             true,
	"response.refusal.delta":                 true,
	"response.reasoning_summary_text.delta":  true,
	"response.reasoning_text.delta":          true,
	"response.function_call_arguments.delta": true,
	"response.custom_tool_call_input.delta":  true,
}

// event reads one typed event by targeted field extraction (see
// openaiWire.chunk). The data's type names the event; the SSE event:
// name is the fallback.
func (responsesWire) event(typ string, data []byte, st *stream) {
	obj, ok := jsonObject(data, st)
	if !ok {
		return
	}
	et := typ
	if _, _, wrong := member(obj, jsonparser.String, "type"); wrong {
		st.bad++
		return
	} else if v, ok := stringMember(obj, "type"); ok && v != "" {
		et = v
	}
	if responsesDeltas[et] {
		textsAt(obj, st, "delta")
		return
	}
	switch et {
	case "response.completed", "response.incomplete", "response.failed":
		resp, present, wrong := member(obj, jsonparser.Object, "response")
		if wrong || !present {
			st.bad++
			return
		}
		responsesEnd(resp, et[len("response."):], st)
	case "error":
		st.fail(responsesErrorCode(obj))
	}
	// response.created, in_progress, output_item.added, the .done events
	// and event types added later carry nothing the stopwatch reads.
}

// whole reads a non-streamed answer: one Response object.
func (responsesWire) whole(data []byte, st *stream) {
	obj, ok := jsonObject(data, nil)
	if !ok {
		st.bad++
		return
	}
	status, _ := stringMember(obj, "status")
	if _, present, _ := member(obj, jsonparser.Object, "error"); present && status == "" {
		st.fail(errorCode(obj)) // an error body ({"error":{…}}) served with a 2xx
		return
	}
	if out, present, _ := member(obj, jsonparser.Array, "output"); present {
		_, _ = jsonparser.ArrayEach(out, func(item []byte, t jsonparser.ValueType, _ int, _ error) {
			if t != jsonparser.Object {
				return
			}
			responsesItemText(item, st)
		})
	}
	responsesEnd(obj, "", st)
}

// responsesItemText feeds an output item's generated text to st: a
// message's output_text and refusal parts, a reasoning item's summary
// (and raw content), a function call's arguments.
func responsesItemText(item []byte, st *stream) {
	for _, list := range [...]string{"content", "summary"} {
		parts, present, _ := member(item, jsonparser.Array, list)
		if !present {
			continue
		}
		_, _ = jsonparser.ArrayEach(parts, func(p []byte, t jsonparser.ValueType, _ int, _ error) {
			if t != jsonparser.Object {
				return
			}
			textsAt(p, st, "text", "refusal")
		})
	}
	textsAt(item, st, "arguments")
}

// responsesEnd reads a finished Response object (a terminal event's, or
// a whole answer): its usage, and its status (else implied, the
// terminal event's), which ends the stream: completed, incomplete (with
// incomplete_details.reason kept) or failed (classified by error.code).
// Any other status (queued, in_progress, cancelled) leaves the answer
// unfinished.
func responsesEnd(resp []byte, implied string, st *stream) {
	if u, present, _ := member(resp, jsonparser.Object, "usage"); present {
		responsesUsage.read(u, st)
	}
	status := implied
	if v, ok := stringMember(resp, "status"); ok {
		status = v
	}
	switch status {
	case "completed":
		st.done = true
	case "incomplete":
		reason, _ := stringMember(resp, "incomplete_details", "reason")
		st.incomplete, st.reason, st.done = true, reason, true
	case "failed":
		code, _ := stringMember(resp, "error", "code")
		st.fail(code)
	default:
		st.bad++
	}
}

// responsesErrorCode is an error event's code: {"type":"error","code":…}
// at the top level, as the API sends it, else an {"error":{…}} object's.
func responsesErrorCode(obj []byte) string {
	if v, ok := stringMember(obj, "code"); ok && v != "" {
		return v
	}
	return errorCode(obj)
}

// stringMember is the string at keys in obj, unescaped, with each
// invalid UTF-8 byte read as U+FFFD (as encoding/json reads it); ok is
// false when it is absent or not a string.
func stringMember(obj []byte, keys ...string) (string, bool) {
	v, present, _ := member(obj, jsonparser.String, keys...)
	if !present {
		return "", false
	}
	s, err := jsonparser.ParseString(v)
	if err != nil {
		return "", false
	}
	if !utf8.ValidString(s) {
		s = string([]rune(s))
	}
	return s, true
}
