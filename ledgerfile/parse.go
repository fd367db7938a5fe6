package ledgerfile

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/go-logfmt/logfmt"

	"retrygate/admit"
)

// A row's line is read with go-logfmt's Decoder. On top of logfmt the
// reader keeps the seed's hand-written form (unquoted words after a
// value belong to that value: `decision=refuse: queue wait`), refuses
// what no row holds (control bytes, invalid UTF-8, a byte order mark in
// a key), and reads each known key into its field (fields, below).

// parser reads lines into rows, one after another, with one Decoder (a
// Decoder has no Reset, and a new one a line costs four allocations).
type parser struct {
	src  lineSource
	dec  *logfmt.Decoder
	strs map[string]string // values that repeat from row to row (seat, model, decision), shared
	// order[n] is 1 + the field of the line before's n-th pair: a writer
	// writes its keys in one order, so that field is tried before the map.
	order [MaxKeys]uint8
}

func newParser() *parser { return &parser{strs: map[string]string{}} }

// lineSource hands the Decoder the line being parsed and its newline, in
// one Read when they fit. It never says io.EOF: the Decoder would stop
// for good.
type lineSource struct {
	rest []byte
	nl   bool
}

func (s *lineSource) Read(p []byte) (int, error) {
	n := copy(p, s.rest)
	s.rest = s.rest[n:]
	if len(s.rest) == 0 && s.nl && n < len(p) {
		s.nl = false
		p[n] = '\n'
		n++
	}
	return n, nil
}

// str is a copy of v, shared with the rows before that held the same
// string.
func (p *parser) str(v string) string {
	if s, ok := p.strs[v]; ok {
		return s
	}
	s := strings.Clone(v)
	if len(p.strs) < 4096 {
		p.strs[s] = s
	}
	return s
}

// ParseLine decodes one logfmt line into row. It accepts seed 003's
// hand-written form, where unquoted words after a value belong to that
// value: `decision=refuse: queue wait`.
func ParseLine(line []byte, row *Row) error { return newParser().parse(line, row) }

// record hands the parser's Decoder line, as its next record.
func (p *parser) record(line []byte) (*logfmt.Decoder, error) {
	if p.dec == nil {
		p.dec = logfmt.NewDecoderSize(&p.src, MaxLine+1)
	}
	p.src.rest, p.src.nl = line, true
	if dec := p.dec; !dec.ScanRecord() {
		p.dec = nil
		return nil, fmt.Errorf("failed to read the line: %w", dec.Err())
	}
	return p.dec, nil
}

// pair is a key and its value, applied to the row once the next key
// shows that no bare word extends the value.
type pair struct {
	key, val []byte
	vs       int  // where an unquoted value starts in the line
	quoted   bool // a quoted value takes no bare words after it
}

func (p *parser) parse(line []byte, row *Row) error {
	if err := checkText(line); err != nil {
		return err
	}
	dec, err := p.record(line)
	if err != nil {
		return err
	}
	*row = Row{}
	var (
		f    = fieldSetter{row: row, p: p}
		last pair
		n    int
		at   int // where the next token starts in line, for bare words
		// Only a line holding a byte order mark needs its keys searched for one.
		hasBOM = bytes.Contains(line, []byte(bom))
	)
	for dec.ScanKeyval() {
		key := dec.Key()
		start := at
		for start < len(line) && line[start] <= ' ' {
			start++
		}
		end := start + len(key)
		if end >= len(line) || line[end] != '=' {
			// A bare word: part of the previous value (hand-written form).
			if n == 0 || last.quoted || len(last.val) == 0 {
				return fmt.Errorf("expected key=value, got %q", truncate(string(key)))
			}
			last.val, at = line[last.vs:end], end
			continue
		}
		if hasBOM && bytes.Contains(key, []byte(bom)) {
			return fmt.Errorf("byte order mark in key %q at column %d", truncate(string(key)), start+1)
		}
		next := pair{key: key, val: dec.Value(), vs: end + 1}
		if at = end + 1; at < len(line) && line[at] == '"' {
			next.quoted, at = true, quotedEnd(line, at)
		} else {
			at += len(next.val)
		}
		if n == MaxKeys {
			return fmt.Errorf("more than %d keys", MaxKeys)
		}
		if n > 0 {
			f.apply(last)
		}
		last = next
		n++
	}
	if err := dec.Err(); err != nil {
		p.dec = nil // a Decoder stops at its first error
		var se *logfmt.SyntaxError
		if !errors.As(err, &se) {
			return err
		}
		if k := dec.Key(); k != nil {
			return fmt.Errorf("%s: %s at column %d", k, se.Msg, se.Pos)
		}
		return fmt.Errorf("%s at column %d", se.Msg, se.Pos)
	}
	if n > 0 {
		f.apply(last)
	}
	if f.err != nil {
		return f.err
	}
	for _, k := range requiredKeys {
		if f.seen&k.bit == 0 {
			return fmt.Errorf("missing required key %s", k.key)
		}
	}
	if row.HasSplit && f.seen&splitKeys != splitKeys {
		return errors.New("prompt_tokens and completion_tokens go together")
	}
	parts, both := f.seen&partKeys != 0, f.seen&partKeys == partKeys
	if (row.TokensFrom == FromMixed) != both || (parts && row.TokensFrom != FromMixed) {
		return errors.New("tokens_from=mixed goes with prompt_tokens_from and completion_tokens_from (written only when the two differ)")
	}
	return nil
}

// quotedEnd is the offset just past the quoted value starting at
// line[i] (the Decoder has checked that it ends).
func quotedEnd(line []byte, i int) int {
	for j := i + 1; j < len(line); j++ {
		switch line[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(line)
}

// checkText refuses what no row holds: invalid UTF-8, and control bytes
// (the writer escapes them in quotes; a NUL is damage, not whitespace).
func checkText(line []byte) error {
	if !utf8.Valid(line) {
		return errors.New("not valid UTF-8")
	}
	for i, c := range line {
		if c < ' ' && c != '\t' {
			return fmt.Errorf("control character 0x%02x at column %d", c, i+1)
		}
	}
	return nil
}

// fieldSetter applies a line's pairs to a row. The first field error is
// kept, not returned: a syntax error further along the line is the one
// the line reports.
type fieldSetter struct {
	row  *Row
	p    *parser
	seen uint64 // the known keys read, by their index in fields
	n    int    // the pairs applied
	err  error
}

func (f *fieldSetter) apply(kv pair) {
	if f.err != nil {
		return
	}
	i, ok := int(f.p.order[f.n])-1, true
	if i < 0 || fields[i].key != string(kv.key) {
		if i, ok = fieldIndex[string(kv.key)]; ok {
			f.p.order[f.n] = uint8(i + 1)
		}
	}
	f.n++
	if !ok {
		f.row.Extra = append(f.row.Extra, KV{string(kv.key), string(kv.val)})
		return
	}
	if f.seen&(1<<i) != 0 {
		f.err = fmt.Errorf("%s: key appears twice", kv.key)
		return
	}
	f.seen |= 1 << i
	// The value is a view of the line, valid in this call only: a field
	// that keeps it copies it (string, or the parser's str).
	if err := fields[i].set(f.row, unsafeString(kv.val), f.p); err != nil {
		f.err = fmt.Errorf("%s: %w", kv.key, err)
	}
}

// keyBit is key's bit in fieldSetter.seen.
func keyBit(key string) uint64 { return 1 << fieldIndex[key] }

// The keys parse checks for on every row, as bits of fieldSetter.seen.
var (
	requiredKeys = [...]struct {
		key string
		bit uint64
	}{{"wait_s", keyBit("wait_s")}, {"elapsed_s", keyBit("elapsed_s")}, {"tokens", keyBit("tokens")}}
	splitKeys = keyBit("prompt_tokens") | keyBit("completion_tokens")
	partKeys  = keyBit("prompt_tokens_from") | keyBit("completion_tokens_from")
)

// field reads one known key's value into a row.
type field struct {
	key string
	set func(r *Row, v string, p *parser) error
}

// fields are the keys this version reads, one line each.
var fields = [...]field{
	{"ts", func(r *Row, v string, _ *parser) error {
		ts, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return fmt.Errorf("not an RFC 3339 time %q", truncate(v))
		}
		r.TS = ts.UTC()
		return CheckTS(r.TS)
	}},
	{"job", func(r *Row, v string, _ *parser) error {
		if v == "" {
			return errors.New("empty job id")
		}
		r.Job = strings.Clone(v)
		return nil
	}},
	{"attempt", func(r *Row, v string, _ *parser) error {
		n, err := admit.ParseCount(v)
		if err != nil || n < 1 || n > admit.MaxAttempts {
			return fmt.Errorf("not an attempt number in 1…%d %q", admit.MaxAttempts, truncate(v))
		}
		r.Attempt = int(n)
		return nil
	}},
	{"seat", func(r *Row, v string, p *parser) error { r.Seat = p.str(v); return nil }},
	{"model", func(r *Row, v string, p *parser) error { r.Model = p.str(v); return nil }},
	{"wait_s", func(r *Row, v string, _ *parser) (err error) { r.Wait, err = parseSeconds(v); return err }},
	{"elapsed_s", func(r *Row, v string, _ *parser) (err error) { r.Elapsed, err = parseSeconds(v); return err }},
	{"ttfb_s", func(r *Row, v string, _ *parser) (err error) {
		r.TTFB, err = parseSeconds(v)
		r.HasTTFB = true
		return err
	}},
	{"connect_s", func(r *Row, v string, _ *parser) (err error) {
		r.Connect, err = parseSeconds(v)
		r.HasConnect = true
		return err
	}},
	{"itl_mean_s", func(r *Row, v string, _ *parser) (err error) {
		r.ITLMean, err = parseSeconds(v)
		r.HasITL = true
		return err
	}},
	{"itl_max_s", func(r *Row, v string, _ *parser) (err error) {
		r.ITLMax, err = parseSeconds(v)
		r.HasITL = true
		return err
	}},
	{"tokens", func(r *Row, v string, _ *parser) (err error) { r.Tokens, err = admit.ParseCount(v); return err }},
	{"prompt_tokens", func(r *Row, v string, _ *parser) (err error) {
		r.PromptTokens, err = admit.ParseCount(v)
		r.HasSplit = true
		return err
	}},
	{"completion_tokens", func(r *Row, v string, _ *parser) (err error) {
		r.CompletionTokens, err = admit.ParseCount(v)
		r.HasSplit = true
		return err
	}},
	{"cached_tokens", func(r *Row, v string, _ *parser) (err error) {
		r.CachedTokens, err = admit.ParseCount(v)
		r.HasCached = true
		return err
	}},
	{"cache_write_tokens", func(r *Row, v string, _ *parser) (err error) {
		r.CacheWriteTokens, err = admit.ParseCount(v)
		r.HasCacheWrite = true
		return err
	}},
	{"reasoning_tokens", func(r *Row, v string, _ *parser) (err error) {
		r.ReasoningTokens, err = admit.ParseCount(v)
		r.HasReasoning = true
		return err
	}},
	{"ratelimit_remaining_requests", func(r *Row, v string, _ *parser) (err error) {
		r.RateLimit.RemainingRequests, err = admit.ParseCount(v)
		r.RateLimit.HasRequests = true
		return err
	}},
	{"ratelimit_remaining_tokens", func(r *Row, v string, _ *parser) (err error) {
		r.RateLimit.RemainingTokens, err = admit.ParseCount(v)
		r.RateLimit.HasTokens = true
		return err
	}},
	{"ratelimit_reset_s", func(r *Row, v string, _ *parser) (err error) {
		r.RateLimit.Reset, err = parseSeconds(v)
		r.RateLimit.HasReset = true
		return err
	}},
	{"tokens_from", func(r *Row, v string, p *parser) error {
		if !knownSource(v, true) {
			return fmt.Errorf("unknown source %q (want usage, tokenizer, script, hand or mixed)", truncate(v))
		}
		r.TokensFrom = p.str(v)
		return nil
	}},
	{"prompt_tokens_from", func(r *Row, v string, p *parser) (err error) {
		r.PromptFrom, err = partSource(v, p)
		return err
	}},
	{"completion_tokens_from", func(r *Row, v string, p *parser) (err error) {
		r.CompletionFrom, err = partSource(v, p)
		return err
	}},
	{"outcome", func(r *Row, v string, _ *parser) (err error) {
		r.Outcome, err = admit.ParseOutcome(v) // one of the package's constants, not v
		return err
	}},
	{"http_status", func(r *Row, v string, _ *parser) error {
		n, err := admit.ParseCount(v)
		if err != nil || n < 100 || n > 999 {
			return fmt.Errorf("not an HTTP status %q", truncate(v))
		}
		r.HTTPStatus = int(n)
		return nil
	}},
	{"billing", func(r *Row, v string, _ *parser) error {
		for _, b := range [...]admit.Billing{admit.Billable, admit.Free, admit.Ambiguous} {
			if admit.Billing(v) == b {
				r.Billing = b // the constant, not a view of the line
				return nil
			}
		}
		return fmt.Errorf("unknown billing %q (want billable, free or ambiguous)", truncate(v))
	}},
	{"cost_usd", func(r *Row, v string, _ *parser) (err error) {
		r.CostUSD, err = parseUSD(v)
		r.HasCost = true
		return err
	}},
	{"uncached_usd", func(r *Row, v string, _ *parser) (err error) { r.UncachedUSD, err = parseUSD(v); return err }},
	{"reserve_usd", func(r *Row, v string, _ *parser) (err error) { r.ReserveUSD, err = parseUSD(v); return err }},
	{"retry_after_s", func(r *Row, v string, _ *parser) (err error) {
		r.RetryAfter, err = parseSeconds(v)
		r.HasRetryAfter = true
		return err
	}},
	{"error_code", func(r *Row, v string, p *parser) error { r.ErrorCode = p.str(v); return nil }},
	{"delay_s", func(r *Row, v string, _ *parser) (err error) { r.Delay, err = parseSeconds(v); return err }},
	{"spent_s", func(r *Row, v string, _ *parser) (err error) {
		r.SpentS, err = parseSeconds(v)
		r.HasSpent = true
		return err
	}},
	{"spent_tokens", func(r *Row, v string, _ *parser) (err error) {
		r.SpentTokens, err = admit.ParseCount(v)
		r.HasSpent = true
		return err
	}},
	{"spent_usd", func(r *Row, v string, _ *parser) (err error) { r.SpentUSD, err = parseUSD(v); return err }},
	{"used", func(r *Row, v string, _ *parser) (err error) {
		r.Used, err = attemptCount(v)
		r.HasSpent = true
		return err
	}},
	{"inflight", func(r *Row, v string, _ *parser) (err error) { r.InFlight, err = attemptCount(v); return err }},
	{"window_firsts", func(r *Row, v string, _ *parser) (err error) {
		r.Window.Firsts, err = windowCount(v)
		r.HasWindow = true
		return err
	}},
	{"window_retries", func(r *Row, v string, _ *parser) (err error) {
		r.Window.Retries, err = windowCount(v)
		r.HasWindow = true
		return err
	}},
	{"decision", func(r *Row, v string, p *parser) error {
		if _, err := admit.ParseDecision(v); err != nil {
			return err
		}
		r.Decision = p.str(v)
		return nil
	}},
	{"sent", func(r *Row, v string, _ *parser) error {
		b, err := parseBool(v)
		r.Unsent = !b
		return err
	}},
	{"holdout", func(r *Row, v string, _ *parser) (err error) { r.Holdout, err = parseBool(v); return err }},
	{"fallback", func(r *Row, v string, _ *parser) (err error) { r.Fallback, err = parseBool(v); return err }},
	{"job_end", func(r *Row, v string, _ *parser) error {
		for _, e := range [...]string{JobSucceeded, JobFailed, JobUnknown, JobCancelled} {
			if v == e {
				r.JobEnd = e
				return nil
			}
		}
		return fmt.Errorf("unknown job end %q (want succeeded, failed, unknown or cancelled)", truncate(v))
	}},
	{"prompt_sha", func(r *Row, v string, _ *parser) error { r.PromptSHA = strings.Clone(v); return nil }},
	{"tags", func(r *Row, v string, _ *parser) error { r.Tags = strings.Clone(v); return nil }},
	{"note", func(r *Row, v string, _ *parser) error { r.Note = strings.Clone(v); return nil }},
}

// fieldIndex finds a known key's entry in fields.
var fieldIndex = func() map[string]int {
	m := make(map[string]int, len(fields))
	for i, f := range fields {
		m[f.key] = i
	}
	return m
}()

// knownKeyCount bounds the unknown keys a row may carry within MaxKeys.
const knownKeyCount = len(fields)

func knownKey(k string) bool { _, ok := fieldIndex[k]; return ok }

// SetField reads one key's value, as the log writes it, into r by the
// reader's own rule for that key. known is false for a key this version
// does not read: a store that keeps a row's keys apart (pgstore's extra)
// keeps such a pair as Extra.
func SetField(r *Row, key, value string) (known bool, err error) {
	i, ok := fieldIndex[key]
	if !ok {
		return false, nil
	}
	if err := fields[i].set(r, value, newParser()); err != nil {
		return true, fmt.Errorf("%s: %w", key, err)
	}
	return true, nil
}

func partSource(v string, p *parser) (string, error) {
	if !knownSource(v, false) {
		return "", fmt.Errorf("unknown source %q (want usage, tokenizer, script or hand)", truncate(v))
	}
	return p.str(v), nil
}

// parseSeconds reads seconds as the log writes them (3 decimals), to the
// microsecond: a double holds any decimal of up to 6 places within
// admit.MaxDuration closer than half a microsecond, so what the writer
// wrote in milliseconds reads back as the same duration.
func parseSeconds(s string) (time.Duration, error) {
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
	return time.Duration(math.Round(f*1e6)) * time.Microsecond, nil
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

// attemptCount is a count of a job's attempts (used, inflight).
func attemptCount(v string) (int, error) {
	n, err := admit.ParseCount(v)
	if err != nil || n > admit.MaxAttempts {
		return 0, fmt.Errorf("not a count of attempts in 0…%d %q", admit.MaxAttempts, truncate(v))
	}
	return int(n), nil
}

// windowCount is a retry budget window's count (window_firsts,
// window_retries).
func windowCount(v string) (int, error) {
	n, err := admit.ParseCount(v)
	if err != nil || n > maxWindowCount {
		return 0, fmt.Errorf("not a count in 0…%d %q", maxWindowCount, truncate(v))
	}
	return int(n), nil
}
