package seat

import "github.com/buger/jsonparser"

// validJSON is encoding/json's Valid, in one tight pass: every stream
// event is checked before its fields are read, inside the timed window,
// and json.Valid's byte-at-a-time state machine was the largest single
// cost of reading an answer. It accepts exactly what json.Valid accepts
// (FuzzValidJSON holds it to that): RFC 8259 values with surrounding
// whitespace, string bytes at or above 0x20 taken as they are (no UTF-8
// check, as json.Valid makes none), and at most 10000 levels of nesting.
func validJSON(b []byte) bool {
	v := jsonValidator{b: b}
	return v.valid()
}

// jsonEach validates b as validJSON does and, in the same pass, hands
// each the members of the object b is (or the elements of the array) as
// jsonparser.ObjectEach (ArrayEach) hands them: a member's key unescaped,
// a string value without its quotes, escapes kept; an element's key is
// nil. A key that does not unescape ends the calls there, as it ends
// ObjectEach, but not the validation. It reports whether b is valid
// JSON; for invalid JSON each may have seen the members before the fault.
// A stream event is read in one walk instead of a validation and then
// another for its fields.
func jsonEach(b []byte, each func(k, v []byte, t jsonparser.ValueType)) bool {
	v := jsonValidator{b: b}
	v.space()
	ok := false
	switch {
	case v.i < len(b) && b[v.i] == '{':
		ok = v.object(1, each)
	case v.i < len(b) && b[v.i] == '[':
		ok = v.array(1, each)
	default:
		ok = v.value(0)
	}
	if !ok {
		return false
	}
	v.space()
	return v.i == len(b)
}

func (v *jsonValidator) valid() bool {
	v.space()
	if !v.value(0) {
		return false
	}
	v.space()
	return v.i == len(v.b)
}

// emit hands each the member or element of the outermost value that
// began at vs and ended at v.i.
func (v *jsonValidator) emit(each func(k, v []byte, t jsonparser.ValueType), key []byte, esc bool, vs int) {
	if v.stop {
		return
	}
	if esc {
		var buf [64]byte // no allocation for a short key (escaped keys are rare)
		k, err := jsonparser.Unescape(key, buf[:])
		if err != nil {
			v.stop = true
			return
		}
		key = k
	}
	val, t := v.b[vs:v.i], jsonparser.Number
	switch val[0] {
	case '"':
		val, t = val[1:len(val)-1], jsonparser.String
	case '{':
		t = jsonparser.Object
	case '[':
		t = jsonparser.Array
	case 't', 'f':
		t = jsonparser.Boolean
	case 'n':
		t = jsonparser.Null
	}
	each(key, val, t)
}

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

type jsonValidator struct {
	b    []byte
	i    int
	stop bool // jsonEach: a key did not unescape, no more calls
	esc  bool // the last string read had an escape
}

func (v *jsonValidator) space() {
	for v.i < len(v.b) {
		switch v.b[v.i] {
		case ' ', '\t', '\r', '\n':
			v.i++
		default:
			return
		}
	}
}

func (v *jsonValidator) value(depth int) bool {
	if v.i >= len(v.b) {
		return false
	}
	switch c := v.b[v.i]; {
	case c == '{':
		return v.object(depth+1, nil)
	case c == '[':
		return v.array(depth+1, nil)
	case c == '"':
		return v.string()
	case c == '-' || c >= '0' && c <= '9':
		return v.number()
	case c == 't':
		return v.literal("true")
	case c == 'f':
		return v.literal("false")
	case c == 'n':
		return v.literal("null")
	}
	return false
}

func (v *jsonValidator) literal(word string) bool {
	if len(v.b)-v.i < len(word) || string(v.b[v.i:v.i+len(word)]) != word {
		return false
	}
	v.i += len(word)
	return true
}

// object and array read a value from its opening bracket, handing each
// (when set) its members or elements.
func (v *jsonValidator) object(depth int, each func(k, v []byte, t jsonparser.ValueType)) bool {
	if depth > maxJSONDepth {
		return false
	}
	v.i++ // {
	v.space()
	if v.i < len(v.b) && v.b[v.i] == '}' {
		v.i++
		return true
	}
	for {
		ks := v.i
		if v.i >= len(v.b) || v.b[v.i] != '"' || !v.string() {
			return false
		}
		key, esc := v.b[ks+1:v.i-1], v.esc
		v.space()
		if v.i >= len(v.b) || v.b[v.i] != ':' {
			return false
		}
		v.i++
		v.space()
		vs := v.i
		if !v.value(depth) {
			return false
		}
		if each != nil {
			v.emit(each, key, esc, vs)
		}
		if end, ok := v.after('}'); end || !ok {
			return ok
		}
	}
}

func (v *jsonValidator) array(depth int, each func(k, v []byte, t jsonparser.ValueType)) bool {
	if depth > maxJSONDepth {
		return false
	}
	v.i++ // [
	v.space()
	if v.i < len(v.b) && v.b[v.i] == ']' {
		v.i++
		return true
	}
	for {
		vs := v.i
		if !v.value(depth) {
			return false
		}
		if each != nil {
			v.emit(each, nil, false, vs)
		}
		if end, ok := v.after(']'); end || !ok {
			return ok
		}
	}
}

// string reads a string from its opening quote.
func (v *jsonValidator) string() bool {
	b := v.b
	i := v.i + 1
	v.esc = false
	for i < len(b) {
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			v.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			v.esc = true
			i++
			if i >= len(b) {
				return false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 {
					return false
				}
				for _, h := range b[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				i += 5
			default:
				return false
			}
		default:
			i++
		}
	}
	return false
}

// plainByte is a string byte that stands for itself: not a quote, a
// backslash or a control character.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (v *jsonValidator) number() bool {
	b := v.b
	i := v.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return false
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	v.i = i
	return true
}

// after reads past the separator that follows a member or an element:
// a comma (more follow) or close (the object or array ends). end reports
// the close; ok is false for anything else.
func (v *jsonValidator) after(close byte) (end, ok bool) {
	v.space()
	if v.i >= len(v.b) {
		return false, false
	}
	switch v.b[v.i] {
	case ',':
		v.i++
		v.space()
		return false, true
	case close:
		v.i++
		return true, true
	}
	return false, false
}
