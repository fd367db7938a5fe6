package ledgerfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"retrygate/admit"
)

// MaxLine is the longest line the reader accepts; a longer one is a bad line.
const MaxLine = 1 << 20

// bom is a UTF-8 byte order mark: dropped at the start of a file, refused
// anywhere else in a key (it would hide the key: "\uFEFFts" is not ts).
const bom = "\uFEFF"

// ErrTorn marks a line a crashed writer left without its newline.
var ErrTorn = errors.New("torn write (no newline at end of line)")

// LineError is a bad line: the file, its 1-based number, and what was wrong.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("%s: line %d: %v", e.File, e.Line, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// Reader reads rows strictly: every malformed line is a *LineError naming
// its number. Blank and '#' lines are skipped, unknown keys kept. A torn
// line (the file's last line without a newline, or the line directly above
// a writer's TornMarker) is not an error: it is skipped and listed in Torn.
//
// A second row for one (job, attempt) is a bad line. The check is exact
// (on the job string, not a hash) and keeps one entry per open job (a job
// is forgotten at its job_end): a bit per attempt number, so its memory
// grows with open jobs and their attempts, never with the rows of the log.
type Reader struct {
	name    string
	lr      *LineReader
	skipBad bool
	jobs    map[string]*attemptSet // open jobs; see checkOrder
	intern  interner

	pending    Row
	pendingErr error
	hasPending bool

	torn    []*LineError
	skipped []*LineError
}

// attemptSet is the attempt numbers read for one open job, one bit each,
// and the line of the job's first row.
type attemptSet struct {
	first int32
	bits  []uint64
}

// add marks attempt a (1 … admit.MaxAttempts) and reports whether it was new.
func (s *attemptSet) add(a int) bool {
	i, bit := (a-1)/64, uint64(1)<<((a-1)%64)
	if i >= len(s.bits) {
		s.bits = append(s.bits, make([]uint64, i+1-len(s.bits))...)
	}
	if s.bits[i]&bit != 0 {
		return false
	}
	s.bits[i] |= bit
	return true
}

// NewReader reads rows from r; name is the file name used in errors.
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{name: name, lr: NewLineReader(r, name, MaxLine), jobs: map[string]*attemptSet{}, intern: interner{}}
}

// SkipBad makes malformed lines warnings (see Skipped) instead of errors.
func (r *Reader) SkipBad(on bool) { r.skipBad = on }

// Torn lists the torn lines skipped so far.
func (r *Reader) Torn() []*LineError { return r.torn }

// Skipped lists the malformed lines skipped under SkipBad.
func (r *Reader) Skipped() []*LineError { return r.skipped }

// Next reads the next row into row. It returns io.EOF at the end.
//
// A row is held back until the line after it is read: only then is it
// known not to be the torn line a TornMarker names.
func (r *Reader) Next(row *Row) error {
	for {
		line, lineNo, torn, err := r.readLine()
		if err == io.EOF {
			if !r.hasPending {
				return io.EOF
			}
			r.hasPending = false
			if err := r.finish(&r.pending, r.pendingErr); err != nil {
				if e := r.bad(err); e != nil {
					return e
				}
				return io.EOF
			}
			*row = r.pending
			return nil
		}
		if err != nil {
			return err
		}
		trimmed := trimLine(line)
		if string(trimmed) == TornMarker {
			// The marker names the line directly above it, and only that one.
			if r.hasPending && r.pending.Line == lineNo-1 {
				r.hasPending = false
				r.torn = append(r.torn, &LineError{File: r.name, Line: r.pending.Line, Err: ErrTorn})
			}
			continue
		}
		if torn {
			// The file's last bytes with no newline: a crashed writer.
			if len(trimmed) > 0 {
				r.torn = append(r.torn, &LineError{File: r.name, Line: lineNo, Err: ErrTorn})
			}
			continue
		}
		if len(trimmed) == 0 || trimmed[0] == '#' {
			continue
		}
		// Emit the previous row now that we know it was not marked torn.
		var out Row
		var outErr error
		emit := r.hasPending
		if emit {
			out, outErr = r.pending, r.pendingErr
		}
		r.pending = Row{}
		r.pendingErr = nil
		if perr := parseLine(trimmed, &r.pending, r.intern); perr != nil {
			r.pendingErr = &LineError{File: r.name, Line: lineNo, Err: perr}
		}
		// Kept even when the line did not parse: a torn marker after it
		// names the torn line by this number.
		r.pending.Line = lineNo
		r.hasPending = true
		if emit {
			if err := r.finish(&out, outErr); err != nil {
				if e := r.bad(err); e != nil {
					return e
				}
				continue
			}
			*row = out
			return nil
		}
	}
}

// finish checks a row known not to be torn against the rows before it.
func (r *Reader) finish(row *Row, parseErr error) error {
	if parseErr != nil {
		return parseErr
	}
	if err := r.checkOrder(row); err != nil {
		return &LineError{File: r.name, Line: row.Line, Err: err}
	}
	return nil
}

func (r *Reader) bad(err error) error {
	var le *LineError
	if r.skipBad && errors.As(err, &le) {
		r.skipped = append(r.skipped, le)
		return nil
	}
	return err
}

// checkOrder refuses a second row for one (job, attempt). Comparison is
// on the exact job string; a job is forgotten at its job_end, so the map
// holds open jobs only.
func (r *Reader) checkOrder(row *Row) error {
	if row.Job == "" || row.Attempt == 0 {
		return nil
	}
	set := r.jobs[row.Job]
	if set == nil {
		set = &attemptSet{first: int32(min(row.Line, math.MaxInt32))}
	}
	if !set.add(row.Attempt) {
		return fmt.Errorf("duplicate attempt: job %q attempt %d appears twice (the job's rows start on line %d)", truncate(row.Job), row.Attempt, set.first)
	}
	if row.JobEnd != "" {
		delete(r.jobs, row.Job)
	} else if r.jobs[row.Job] == nil {
		r.jobs[row.Job] = set
	}
	return nil
}

// readLine returns the next line without its newline; torn is true for a
// final line that has none. A line past MaxLine is a bad line (a torn one
// when it is the file's unterminated tail).
func (r *Reader) readLine() (line []byte, no int, torn bool, err error) {
	for {
		line, no, torn, err = r.lr.Next()
		if err == nil || err == io.EOF {
			return line, no, torn, err
		}
		var le *LineError
		if !errors.As(err, &le) {
			return nil, no, false, fmt.Errorf("failed to read log %q: %w", r.name, err)
		}
		if !torn {
			var serr error
			if torn, serr = r.lr.SkipRest(); serr != nil {
				return nil, no, false, serr
			}
		}
		if torn {
			return []byte("x"), no, true, nil // an unterminated over-long tail is torn
		}
		if e := r.bad(err); e != nil {
			return nil, no, false, e
		}
	}
}

// ReadAll reads every row of r, strictly.
func ReadAll(rd io.Reader, name string) ([]Row, *Reader, error) {
	r := NewReader(rd, name)
	var rows []Row
	for {
		var row Row
		err := r.Next(&row)
		if err == io.EOF {
			return rows, r, nil
		}
		if err != nil {
			return rows, r, err
		}
		rows = append(rows, row)
	}
}

// OpenLog opens a log for reading. It refuses a symbolic link (a log is
// appended to, and a link would send rows into an unrelated file) and
// anything but a regular file (a FIFO would hang the read, a device never
// ends). A missing log is an error wrapping fs.ErrNotExist.
func OpenLog(path string) (*os.File, error) {
	return openRegular(path, "log", os.O_RDONLY|noFollow|nonBlock, 0)
}

// ReadFile reads every row of the log at path. A missing file has no rows.
func ReadFile(path string) ([]Row, *Reader, error) {
	f, err := OpenLog(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, NewReader(bytes.NewReader(nil), path), nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	return ReadAll(f, path)
}

// ParseLine decodes one logfmt line into row. It accepts seed 003's
// hand-written form, where unquoted words after a value belong to that
// value: `decision=refuse: queue wait`.
func ParseLine(line []byte, row *Row) error {
	return parseLine(line, row, nil)
}

// span is one key=value pair as offsets into the line; quoted values with
// escapes are unquoted into val.
type span struct {
	key    []byte
	val    []byte
	vs     int  // offset of an unquoted value in the line
	quoted bool // a quoted value takes no bare words after it
}

// interner shares the strings that repeat from row to row (seat, model,
// decision), so a million-row log does not allocate a million copies.
type interner map[string]string

func (in interner) str(b []byte) string {
	if in == nil {
		return string(b)
	}
	if s, ok := in[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(in) < 4096 {
		in[s] = s
	}
	return s
}

func parseLine(line []byte, row *Row, in interner) error {
	if !utf8.Valid(line) {
		return errors.New("not valid UTF-8")
	}
	for i, c := range line {
		// Control bytes are never written raw (the writer escapes them in
		// quotes); a NUL is damage, not whitespace.
		if c < ' ' && c != '\t' {
			return fmt.Errorf("control character 0x%02x at column %d", c, i+1)
		}
	}
	var (
		spans [MaxKeys]span
		n     int
		seen  uint64
	)
	p := 0
	for p < len(line) {
		for p < len(line) && line[p] <= ' ' {
			p++
		}
		if p >= len(line) {
			break
		}
		start := p
		for p < len(line) && line[p] > ' ' && line[p] != '=' && line[p] != '"' {
			p++
		}
		key := line[start:p]
		if p < len(line) && line[p] == '"' {
			return fmt.Errorf("unexpected '\"' at column %d", p+1)
		}
		if p >= len(line) || line[p] != '=' {
			// A bare word: part of the previous value (hand-written form).
			if n == 0 || spans[n-1].quoted || len(spans[n-1].val) == 0 {
				return fmt.Errorf("expected key=value, got %q", truncate(string(key)))
			}
			spans[n-1].val = line[spans[n-1].vs:p]
			continue
		}
		if len(key) == 0 {
			return fmt.Errorf("missing key before '=' at column %d", p+1)
		}
		if bytes.Contains(key, []byte(bom)) {
			return fmt.Errorf("byte order mark in key %q at column %d", truncate(string(key)), start+1)
		}
		p++ // '='
		var sp span
		sp.key = key
		if p < len(line) && line[p] == '"' {
			end := p + 1
			for end < len(line) {
				if line[end] == '\\' {
					end += 2
					continue
				}
				if line[end] == '"' {
					break
				}
				end++
			}
			if end >= len(line) {
				return fmt.Errorf("%s: unterminated quoted value", key)
			}
			q := line[p : end+1]
			if bytes.IndexByte(q, '\\') < 0 {
				sp.val = q[1 : len(q)-1]
			} else {
				u, err := strconv.Unquote(string(q))
				if err != nil {
					return fmt.Errorf("%s: invalid quoted value %s", key, truncate(string(q)))
				}
				sp.val = []byte(u)
			}
			sp.quoted = true
			p = end + 1
			if p < len(line) && line[p] > ' ' {
				return fmt.Errorf("%s: unexpected %q after quoted value", key, line[p])
			}
		} else {
			vs := p
			for p < len(line) && line[p] > ' ' {
				if line[p] == '=' || line[p] == '"' {
					return fmt.Errorf("%s: unexpected %q in value (quote values that contain it)", key, line[p])
				}
				p++
			}
			sp.val, sp.vs = line[vs:p], vs
		}
		if n == len(spans) {
			return fmt.Errorf("more than %d keys", len(spans))
		}
		spans[n] = sp
		n++
	}
	*row = Row{}
	for i := 0; i < n; i++ {
		bit, err := setField(row, spans[i].key, spans[i].val, in)
		if err != nil {
			return fmt.Errorf("%s: %w", spans[i].key, err)
		}
		if bit != 0 {
			if seen&bit != 0 {
				return fmt.Errorf("%s: key appears twice", spans[i].key)
			}
			seen |= bit
		}
	}
	for _, k := range [...]struct {
		bit uint64
		key string
	}{{bitWait, "wait_s"}, {bitElapsed, "elapsed_s"}, {bitTokens, "tokens"}} {
		if seen&k.bit == 0 {
			return fmt.Errorf("missing required key %s", k.key)
		}
	}
	if row.HasSplit && seen&(bitPrompt|bitCompletion) != bitPrompt|bitCompletion {
		return errors.New("prompt_tokens and completion_tokens go together")
	}
	parts := seen & (bitPromptFrom | bitCompletionFrom)
	if (row.TokensFrom == FromMixed) != (parts == bitPromptFrom|bitCompletionFrom) || (parts != 0 && row.TokensFrom != FromMixed) {
		return errors.New("tokens_from=mixed goes with prompt_tokens_from and completion_tokens_from (written only when the two differ)")
	}
	return nil
}

const (
	bitTS uint64 = 1 << iota
	bitJob
	bitAttempt
	bitSeat
	bitModel
	bitWait
	bitElapsed
	bitTTFB
	bitTokens
	bitPrompt
	bitCompletion
	bitTokensFrom
	bitOutcome
	bitStatus
	bitBilling
	bitCost
	bitRetryAfter
	bitErrorCode
	bitDelay
	bitSpentS
	bitSpentTokens
	bitSpentUSD
	bitUsed
	bitDecision
	bitSent
	bitHoldout
	bitFallback
	bitJobEnd
	bitPromptSHA
	bitNote
	bitReserve
	bitConnect
	bitPromptFrom
	bitCompletionFrom
	bitTags
	bitITLMean
	bitITLMax
)

// knownKeys are the keys this version reads; knownKeyCount bounds the
// unknown keys a row may carry within MaxKeys.
var knownKeys = map[string]bool{
	"ts": true, "job": true, "attempt": true, "seat": true, "model": true,
	"wait_s": true, "elapsed_s": true, "ttfb_s": true, "tokens": true,
	"prompt_tokens": true, "completion_tokens": true, "tokens_from": true,
	"prompt_tokens_from": true, "completion_tokens_from": true,
	"outcome": true, "http_status": true, "billing": true, "cost_usd": true,
	"retry_after_s": true, "error_code": true, "delay_s": true,
	"spent_s": true, "spent_tokens": true, "spent_usd": true, "used": true,
	"decision": true, "sent": true, "holdout": true, "fallback": true,
	"job_end": true, "prompt_sha": true, "note": true, "reserve_usd": true, "connect_s": true,
	"tags":       true,
	"itl_mean_s": true, "itl_max_s": true,
}

var knownKeyCount = len(knownKeys)

func knownKey(k string) bool { return knownKeys[k] }

func setField(row *Row, key, v []byte, in interner) (uint64, error) {
	var err error
	val := unsafeString(v) // valid only in this call; stored strings are copied or interned
	switch string(key) {
	case "ts":
		row.TS, err = time.Parse(time.RFC3339Nano, val)
		if err != nil {
			return 0, fmt.Errorf("not an RFC 3339 time %q", truncate(string(v)))
		}
		row.TS = row.TS.UTC()
		if err := CheckTS(row.TS); err != nil {
			return 0, err
		}
		return bitTS, nil
	case "job":
		if val == "" {
			return 0, errors.New("empty job id")
		}
		row.Job = string(v)
		return bitJob, nil
	case "attempt":
		n, err := parseCount(val)
		if err != nil || n < 1 || n > admit.MaxAttempts {
			return 0, fmt.Errorf("not an attempt number in 1…%d %q", admit.MaxAttempts, truncate(val))
		}
		row.Attempt = int(n)
		return bitAttempt, nil
	case "seat":
		row.Seat = in.str(v)
		return bitSeat, nil
	case "model":
		row.Model = in.str(v)
		return bitModel, nil
	case "wait_s":
		row.Wait, err = parseSeconds(val)
		return bitWait, err
	case "elapsed_s":
		row.Elapsed, err = parseSeconds(val)
		return bitElapsed, err
	case "ttfb_s":
		row.TTFB, err = parseSeconds(val)
		row.HasTTFB = true
		return bitTTFB, err
	case "tokens":
		row.Tokens, err = parseCount(val)
		return bitTokens, err
	case "prompt_tokens":
		row.PromptTokens, err = parseCount(val)
		row.HasSplit = true
		return bitPrompt, err
	case "completion_tokens":
		row.CompletionTokens, err = parseCount(val)
		row.HasSplit = true
		return bitCompletion, err
	case "tokens_from":
		if !knownSource(val, true) {
			return 0, fmt.Errorf("unknown source %q (want usage, tokenizer, script, hand or mixed)", truncate(val))
		}
		row.TokensFrom = in.str(v)
		return bitTokensFrom, nil
	case "prompt_tokens_from", "completion_tokens_from":
		if !knownSource(val, false) {
			return 0, fmt.Errorf("unknown source %q (want usage, tokenizer, script or hand)", truncate(val))
		}
		if key[0] == 'p' {
			row.PromptFrom = in.str(v)
			return bitPromptFrom, nil
		}
		row.CompletionFrom = in.str(v)
		return bitCompletionFrom, nil
	case "outcome":
		o, err := admit.ParseOutcome(val)
		row.Outcome = o // one of the package's constants, not val
		return bitOutcome, err
	case "http_status":
		n, err := parseCount(val)
		if err != nil || n < 100 || n > 999 {
			return 0, fmt.Errorf("not an HTTP status %q", truncate(val))
		}
		row.HTTPStatus = int(n)
		return bitStatus, nil
	case "billing":
		switch admit.Billing(val) {
		case admit.Billable, admit.Free, admit.Ambiguous:
			row.Billing = admit.Billing(in.str(v))
			return bitBilling, nil
		}
		return 0, fmt.Errorf("unknown billing %q (want billable, free or ambiguous)", truncate(val))
	case "cost_usd":
		row.CostUSD, err = parseUSD(val)
		row.HasCost = true
		return bitCost, err
	case "connect_s":
		row.Connect, err = parseSeconds(val)
		row.HasConnect = true
		return bitConnect, err
	case "itl_mean_s":
		row.ITLMean, err = parseSeconds(val)
		row.HasITL = true
		return bitITLMean, err
	case "itl_max_s":
		row.ITLMax, err = parseSeconds(val)
		row.HasITL = true
		return bitITLMax, err
	case "reserve_usd":
		row.ReserveUSD, err = parseUSD(val)
		return bitReserve, err
	case "retry_after_s":
		row.RetryAfter, err = parseSeconds(val)
		row.HasRetryAfter = true
		return bitRetryAfter, err
	case "error_code":
		row.ErrorCode = in.str(v)
		return bitErrorCode, nil
	case "delay_s":
		row.Delay, err = parseSeconds(val)
		return bitDelay, err
	case "spent_s":
		row.SpentS, err = parseSeconds(val)
		row.HasSpent = true
		return bitSpentS, err
	case "spent_tokens":
		row.SpentTokens, err = parseCount(val)
		row.HasSpent = true
		return bitSpentTokens, err
	case "spent_usd":
		row.SpentUSD, err = parseUSD(val)
		return bitSpentUSD, err
	case "used":
		n, err := parseCount(val)
		if err != nil || n > admit.MaxAttempts {
			return 0, fmt.Errorf("not a count of attempts in 0…%d %q", admit.MaxAttempts, truncate(val))
		}
		row.Used = int(n)
		row.HasSpent = true
		return bitUsed, nil
	case "decision":
		if _, err := admit.ParseDecision(val); err != nil {
			return 0, err
		}
		row.Decision = in.str(v)
		return bitDecision, nil
	case "sent":
		b, err := parseBool(val)
		row.Unsent = !b
		return bitSent, err
	case "holdout":
		row.Holdout, err = parseBool(val)
		return bitHoldout, err
	case "fallback":
		row.Fallback, err = parseBool(val)
		return bitFallback, err
	case "job_end":
		switch val {
		case JobSucceeded, JobFailed, JobUnknown, JobCancelled:
			row.JobEnd = in.str(v)
			return bitJobEnd, nil
		}
		return 0, fmt.Errorf("unknown job end %q (want succeeded, failed, unknown or cancelled)", truncate(val))
	case "prompt_sha":
		row.PromptSHA = string(v)
		return bitPromptSHA, nil
	case "tags":
		row.Tags = string(v)
		return bitTags, nil
	case "note":
		row.Note = string(v)
		return bitNote, nil
	}
	row.Extra = append(row.Extra, KV{string(key), string(v)})
	return 0, nil
}

func parseSeconds(s string) (time.Duration, error) {
	if d, ok := decimalSeconds(s); ok {
		if d > admit.MaxDuration {
			return 0, fmt.Errorf("more than %.0f seconds %q", admit.MaxDuration.Seconds(), truncate(s))
		}
		return d, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a number %q", truncate(s))
	}
	if f < 0 {
		return 0, fmt.Errorf("negative seconds %q", truncate(s))
	}
	if f > admit.MaxDuration.Seconds() {
		return 0, fmt.Errorf("more than %.0f seconds %q", admit.MaxDuration.Seconds(), truncate(s))
	}
	return time.Duration(math.Round(f * 1e9)), nil
}

// decimalSeconds reads plain decimal seconds ("7.200", "18") exactly, to
// the nanosecond, so what the writer wrote in milliseconds reads back as
// the same duration (a float would turn 4194304.008 into …008000001).
// ok is false for any other form, which then goes through ParseFloat.
func decimalSeconds(s string) (d time.Duration, ok bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(whole) > 10 {
		return 0, false
	}
	var sec, ns int64
	for i := 0; i < len(whole); i++ {
		c := whole[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		sec = sec*10 + int64(c-'0')
	}
	scale := int64(1e8)
	for i := 0; i < len(frac); i++ {
		c := frac[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		switch {
		case scale > 0:
			ns += int64(c-'0') * scale
			scale /= 10
		case scale == 0 && c >= '5':
			ns++ // round half up at the tenth digit
			scale = -1
		default:
			scale = -1
		}
	}
	return time.Duration(sec)*time.Second + time.Duration(ns), true
}

func parseCount(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a whole number %q", truncate(s))
	}
	if n < 0 {
		return 0, fmt.Errorf("negative count %q", truncate(s))
	}
	if n > admit.MaxTokens {
		return 0, fmt.Errorf("count over %d %q", admit.MaxTokens, truncate(s))
	}
	return n, nil
}

func parseUSD(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a number %q", truncate(s))
	}
	if f < 0 {
		return 0, fmt.Errorf("negative amount %q", truncate(s))
	}
	if f > admit.MaxUSD {
		return 0, fmt.Errorf("amount over %.0f %q", admit.MaxUSD, truncate(s))
	}
	return f, nil
}

func parseBool(s string) (bool, error) {
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("not true or false %q", truncate(s))
}

// truncate shortens s for an error message, copying it (s may alias a
// reused line buffer).
func truncate(s string) string {
	if len(s) > 40 {
		return strings.ToValidUTF8(s[:40], "") + "…"
	}
	return strings.Clone(s)
}

// unsafeString views b as a string without copying, for parsing only.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// trimLine drops ASCII blanks around a line (a CR before the newline
// among them). Unicode spaces are text: an unquoted value may end in one.
func trimLine(b []byte) []byte {
	return bytes.Trim(b, " \t\r\v\f")
}
