package seat

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unsafe"

	"github.com/buger/jsonparser"

	"github.com/retrygate/retrygate/admit"
)

// textOf feeds a text field found by jsonparser to st, read leniently:
// a string, or an array of parts whose "text" members are joined (some
// compatible servers send content that way); null or any other shape is
// empty, never an error that would drop the whole event. A string without escapes is read in place
// (st copies what it keeps).
func textOf(v []byte, t jsonparser.ValueType, st *stream) {
	switch t {
	case jsonparser.String:
		if len(v) == 0 {
			return
		}
		if bytes.IndexByte(v, '\\') < 0 {
			st.text(unsafe.String(&v[0], len(v)))
			return
		}
		if s, err := jsonparser.ParseString(v); err == nil {
			st.text(s)
		}
	case jsonparser.Array:
		_, _ = jsonparser.ArrayEach(v, func(p []byte, pt jsonparser.ValueType, _ int, _ error) {
			if pt != jsonparser.Object {
				return
			}
			if tv, tt, _, err := jsonparser.Get(p, "text"); err == nil && tt == jsonparser.String {
				textOf(tv, tt, st)
			}
		})
	}
}

// textsAt feeds the text (textOf) of each of obj's members named keys to
// st, in order.
func textsAt(obj []byte, st *stream, keys ...string) {
	for _, k := range keys {
		if v, vt, _, err := jsonparser.Get(obj, k); err == nil {
			textOf(v, vt, st)
		}
	}
}

// countOf reads the token count at keys in obj (see TokenCount).
func countOf(obj []byte, keys ...string) (int64, bool) {
	v, t, _, err := jsonparser.Get(obj, keys...)
	if err != nil || t != jsonparser.Number {
		return 0, false
	}
	return TokenCount(v)
}

// TokenCount reads a token count leniently from one JSON value, as it
// stands in a body: any JSON number, clamped into [0, admit.MaxTokens]
// (9e18, -3, 2.5 and 1e400 are all counts a broken server or client has
// sent); anything else (a string, null, nothing) is no count. Every
// reader of a count in a body calls it: the seat's usage, the proxy's
// client bodies.
func TokenCount(raw []byte) (int64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		return 0, false
	}
	// ParseFloat gives ±Inf with a range error past float64: clamped too.
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil && !math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return admit.ClampTokensFloat(f), true
}

// member finds key in a JSON object for the targeted readers: v is its
// value when it is of type want; present is false when it is absent or
// null; wrong says it is there with another type (a malformed event, as
// encoding/json would have it).
func member(obj []byte, want jsonparser.ValueType, keys ...string) (v []byte, present, wrong bool) {
	v, t, _, err := jsonparser.Get(obj, keys...)
	if err != nil || t == jsonparser.Null {
		return nil, false, false
	}
	if t != want {
		return nil, false, true
	}
	return v, true, false
}

// jsonObject says data is one valid JSON object. Anything else but null
// (an empty object, as encoding/json has it) is a malformed event, counted
// on st when st is not nil.
func jsonObject(data []byte, st *stream) (obj []byte, ok bool) {
	data = bytes.TrimSpace(data)
	if json.Valid(data) && len(data) > 0 && data[0] == '{' {
		return data, true
	}
	if st != nil && !bytes.Equal(data, []byte("null")) {
		st.bad++
	}
	return nil, false
}
