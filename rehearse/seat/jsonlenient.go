package seat

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"retrygate/admit"
)

// jsonText is a text field read leniently: a string, or an array of
// parts whose "text" members are joined (some compatible servers send
// content that way); null or any other shape is empty, never an error
// that would drop the whole event.
type jsonText string

func (t *jsonText) UnmarshalJSON(b []byte) error {
	*t = ""
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	switch b[0] {
	case '"':
		var s string
		if json.Unmarshal(b, &s) == nil {
			*t = jsonText(s)
		}
	case '[':
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(b, &parts) == nil {
			var all []byte
			for _, p := range parts {
				all = append(all, p.Text...)
			}
			*t = jsonText(all)
		}
	}
	return nil
}

// jsonInt is a token count read leniently: any JSON number, clamped into
// [0, admit.MaxTokens] (9e18, -3, 2.5 and 1e400 are all counts a broken
// server has sent); anything else is absent.
type jsonInt struct {
	n  int64
	ok bool
}

func (i *jsonInt) UnmarshalJSON(b []byte) error {
	*i = jsonInt{}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || !(b[0] == '-' || b[0] >= '0' && b[0] <= '9') {
		return nil
	}
	// ParseFloat gives ±Inf with a range error past float64: clamped too.
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !math.IsInf(f, 0) {
		return nil
	}
	*i = jsonInt{n: admit.ClampTokensFloat(f), ok: true}
	return nil
}

// present reports a count the answer actually gave.
func (i *jsonInt) present() bool { return i != nil && i.ok }

func (i *jsonInt) value() int64 {
	if i == nil {
		return 0
	}
	return i.n
}
