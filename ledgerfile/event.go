package ledgerfile

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-logfmt/logfmt"

	"github.com/retrygate/retrygate/admit"
)

// eventPrefix starts an event line: a comment, so that a reader that
// does not know events skips it.
const eventPrefix = "# event "

// EventBreaker is the kind of a breaker's change of state.
const EventBreaker = "breaker"

// EventRequest is the kind of a request the proxy answered that is no
// attempt of a job: a pass-through (a model list) or a refusal before any
// job (off the allow-list, over a job-table limit). Summaries skip it, so
// report and check never count it as an attempt.
const EventRequest = "request"

// EventLog is the kind of something that happened to the log itself
// while a proxy wrote it: what=reopened (its path named another file,
// reason removed or replaced, and the writer opened the path again) or
// what=lost (rows=N never reached it, reason as the metrics'). Summaries
// skip it.
const EventLog = "log"

// Event is a `# event` comment line: something that happened that is not
// an attempt, in logfmt after its kind,
//
//	# event breaker seat=scratch from=closed to=open ts=2026-11-30T10:00:07.2Z
//
// For a breaker, From and To are admit.BreakerState names (closed, open,
// half-open) and TS is when the loop (or the proxy) saw the change.
type Event struct {
	Line int // 1-based line number in the file it was read from; 0 when built

	Kind     string    // the word after "# event": EventBreaker
	TS       time.Time // UTC
	Seat     string
	From, To string
	Extra    []KV // keys this version does not know, in file order
}

// breakerStates are the states a breaker event may name.
var breakerStates = map[string]bool{
	admit.Closed.String(): true, admit.Open.String(): true, admit.HalfOpen.String(): true,
}

// checkEvent refuses an event the log cannot hold, or that a reader
// would not read back.
func checkEvent(e *Event) error {
	if e.Kind == "" || strings.Contains(e.Kind, "#") || !logfmtKey(e.Kind) {
		return fmt.Errorf("event kind %q: want one word", truncate(e.Kind))
	}
	if e.TS.IsZero() {
		return errors.New("event without ts")
	}
	if err := CheckTS(e.TS.UTC()); err != nil {
		return err
	}
	if e.Kind == EventBreaker {
		if e.Seat == "" {
			return errors.New("breaker event without seat")
		}
		if !breakerStates[e.From] || !breakerStates[e.To] {
			return fmt.Errorf("breaker event from %q to %q: want closed, open or half-open", truncate(e.From), truncate(e.To))
		}
	}
	return nil
}

// AppendEvent appends e as one event line, newline included, to dst.
func AppendEvent(dst []byte, e *Event) ([]byte, error) {
	if err := checkEvent(e); err != nil {
		return dst, &cannotHold{"an event", err}
	}
	var body bytes.Buffer
	enc := logfmt.NewEncoder(&body)
	kv := []any{}
	if e.Seat != "" {
		kv = append(kv, "seat", cleanValue(e.Seat))
	}
	if e.From != "" || e.To != "" {
		kv = append(kv, "from", e.From, "to", e.To)
	}
	for _, x := range e.Extra {
		if eventKey(x.Key) {
			kv = append(kv, x.Key, cleanValue(x.Value))
		}
	}
	kv = append(kv, "ts", e.TS.UTC().Format(time.RFC3339Nano))
	if err := enc.EncodeKeyvals(kv...); err != nil {
		return dst, &cannotHold{"an event", err}
	}
	dst = append(dst, eventPrefix...)
	dst = append(dst, e.Kind...)
	dst = append(dst, ' ')
	dst = append(dst, body.Bytes()...)
	return append(dst, '\n'), nil
}

// eventKeys are the keys Event has fields for.
var eventKeys = map[string]bool{"seat": true, "from": true, "to": true, "ts": true}

// eventKey is an unknown key an event line can carry and read back.
func eventKey(k string) bool { return writableKey(k) && !eventKeys[k] }

// logfmtKey reports whether go-logfmt writes k as a key unchanged: a
// word, with no blank, control character, '=', '"', DEL or invalid UTF-8.
func logfmtKey(k string) bool {
	b, err := logfmt.MarshalKeyvals(k, "")
	return err == nil && string(b) == k+"="
}

// ParseEvent decodes an event line (blanks around it trimmed, no newline).
// A line that is not a whole event (its keys torn off, a bad ts, a breaker
// state no breaker has) is an error: readers then take it for a plain
// comment.
func ParseEvent(line []byte) (Event, error) {
	var e Event
	rest, ok := bytes.CutPrefix(trimLine(line), []byte(eventPrefix))
	if !ok {
		return e, errors.New("not an event line")
	}
	kind, body, _ := bytes.Cut(bytes.TrimLeft(rest, " \t"), []byte(" "))
	e.Kind = string(kind)
	dec := logfmt.NewDecoder(bytes.NewReader(body))
	seen := map[string]bool{}
	for dec.ScanRecord() {
		for dec.ScanKeyval() {
			k, v := string(dec.Key()), string(dec.Value())
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				// Written back, it would come back as U+FFFD: refused,
				// as a row's bytes are.
				return Event{}, fmt.Errorf("%s: not UTF-8", truncate(k))
			}
			if seen[k] {
				return Event{}, fmt.Errorf("%s: key appears twice", k)
			}
			seen[k] = true
			switch k {
			case "seat":
				e.Seat = v
			case "from":
				e.From = v
			case "to":
				e.To = v
			case "ts":
				ts, err := time.Parse(time.RFC3339Nano, v)
				if err != nil {
					return Event{}, fmt.Errorf("ts: not an RFC 3339 time %q", truncate(v))
				}
				e.TS = ts.UTC()
			default:
				e.Extra = append(e.Extra, KV{k, v})
			}
		}
	}
	if err := dec.Err(); err != nil {
		return Event{}, err
	}
	if err := checkEvent(&e); err != nil {
		return Event{}, err
	}
	return e, nil
}

// FormatEvent is AppendEvent into a new string, without the newline.
func FormatEvent(e *Event) (string, error) {
	b, err := AppendEvent(nil, e)
	if err != nil {
		return "", err
	}
	return string(b[:len(b)-1]), nil
}
