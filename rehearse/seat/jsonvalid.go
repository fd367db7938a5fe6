package seat

// validJSON is encoding/json's Valid, in one tight pass: every stream
// event is checked before its fields are read, inside the timed window,
// and json.Valid's byte-at-a-time state machine was the largest single
// cost of reading an answer. It accepts exactly what json.Valid accepts
// (FuzzValidJSON holds it to that): RFC 8259 values with surrounding
// whitespace, string bytes at or above 0x20 taken as they are (no UTF-8
// check, as json.Valid makes none), and at most 10000 levels of nesting.
func validJSON(b []byte) bool {
	v := jsonValidator{b: b}
	v.space()
	if !v.value(0) {
		return false
	}
	v.space()
	return v.i == len(b)
}

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

type jsonValidator struct {
	b []byte
	i int
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
		return v.object(depth + 1)
	case c == '[':
		return v.array(depth + 1)
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

func (v *jsonValidator) object(depth int) bool {
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
		if v.i >= len(v.b) || v.b[v.i] != '"' || !v.string() {
			return false
		}
		v.space()
		if v.i >= len(v.b) || v.b[v.i] != ':' {
			return false
		}
		v.i++
		v.space()
		if !v.value(depth) {
			return false
		}
		v.space()
		if v.i >= len(v.b) {
			return false
		}
		switch v.b[v.i] {
		case ',':
			v.i++
			v.space()
		case '}':
			v.i++
			return true
		default:
			return false
		}
	}
}

func (v *jsonValidator) array(depth int) bool {
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
		if !v.value(depth) {
			return false
		}
		v.space()
		if v.i >= len(v.b) {
			return false
		}
		switch v.b[v.i] {
		case ',':
			v.i++
			v.space()
		case ']':
			v.i++
			return true
		default:
			return false
		}
	}
}

// string reads a string from its opening quote.
func (v *jsonValidator) string() bool {
	b := v.b
	i := v.i + 1
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			v.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
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
