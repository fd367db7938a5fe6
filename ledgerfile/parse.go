package ledgerfile

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/go-logfmt/logfmt"

	"github.com/retrygate/retrygate/admit"
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
	if missing := requiredBits &^ f.seen; missing != 0 {
		return fmt.Errorf("missing required key %s", fields[bits.TrailingZeros64(missing)].key)
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

// requiredKeys are the keys every row holds, a hand-written one too: the
// reader refuses a row without one, and the writer writes them on every
// row.
var requiredKeys = [...]string{"wait_s", "elapsed_s", "tokens"}

// The keys parse checks for on every row, as bits of fieldSetter.seen.
var (
	requiredBits = keyBit(requiredKeys[0]) | keyBit(requiredKeys[1]) | keyBit(requiredKeys[2])
	splitKeys    = keyBit("prompt_tokens") | keyBit("completion_tokens")
	partKeys     = keyBit("prompt_tokens_from") | keyBit("completion_tokens_from")
)

// field is one key this version knows, for the reader and the writer
// alike: set reads its value into a row, get is the value the writer
// writes, ok false when it leaves the key out: the row has no value, or
// one the log has no word for (returned still: Check refuses it).
type field struct {
	key string
	set func(r *Row, v string, p *parser) error
	get func(r *Row) (v string, ok bool)
}

// number is a numeric key's field: parse and format are its kind's
// (seconds, a count, USD), at says where its value lives in a row and its
// Has flag, if it has one, which reading the key sets. The writer writes
// the key when that flag is set, or, with no flag, when the value is above
// zero; a required key on every row.
func number[T int | int64 | float64 | time.Duration](key string, parse func(string) (T, error), format func(T) string, at func(*Row) (*T, *bool)) field {
	required := slices.Contains(requiredKeys[:], key)
	return field{key: key,
		set: func(r *Row, v string, _ *parser) (err error) {
			x, has := at(r)
			*x, err = parse(v)
			if has != nil {
				*has = true
			}
			return err
		},
		get: func(r *Row) (string, bool) {
			x, has := at(r)
			if !required && (has != nil && !*has || has == nil && *x <= 0) {
				return "", false
			}
			return format(*x), true
		}}
}

func seconds(key string, at func(*Row) (*time.Duration, *bool)) field {
	return number(key, parseSeconds, FormatSeconds, at)
}

func count(key string, at func(*Row) (*int64, *bool)) field {
	return number(key, admit.ParseCount, func(n int64) string { return strconv.FormatInt(n, 10) }, at)
}

func usd(key string, at func(*Row) (*float64, *bool)) field {
	return number(key, parseUSD, formatUSD, at)
}

func whole(key string, parse func(string) (int, error), at func(*Row) (*int, *bool)) field {
	return number(key, parse, strconv.Itoa, at)
}

// text is a string key's field, written when not empty. A shared value
// (a seat, a model: the same from row to row) is kept once for the rows
// that repeat it.
func text(key string, shared bool, at func(*Row) *string) field {
	return field{key: key,
		set: func(r *Row, v string, p *parser) error {
			if shared {
				*at(r) = p.str(v)
			} else {
				*at(r) = strings.Clone(v)
			}
			return nil
		},
		get: func(r *Row) (string, bool) { s := *at(r); return s, s != "" }}
}

// flag is a true-or-false key's field, written when true.
func flag(key string, at func(*Row) *bool) field {
	return field{key: key,
		set: func(r *Row, v string, _ *parser) (err error) { *at(r), err = parseBool(v); return err },
		get: func(r *Row) (string, bool) { return "true", *at(r) }}
}

// oneOf is the field of a key that holds one of values (what names it in
// errors), written when it does. Reading keeps the constant, not a view
// of the line.
func oneOf[S ~string](key, what string, values []S, at func(*Row) *S) field {
	want := make([]string, len(values))
	for i, v := range values {
		want[i] = string(v)
	}
	wants := strings.Join(want[:len(want)-1], ", ") + " or " + want[len(want)-1]
	return field{key: key,
		set: func(r *Row, v string, _ *parser) error {
			if i := slices.Index(values, S(v)); i >= 0 {
				*at(r) = values[i]
				return nil
			}
			return fmt.Errorf("unknown %s %q (want %s)", what, truncate(v), wants)
		},
		get: func(r *Row) (string, bool) { v := *at(r); return string(v), slices.Contains(values, v) }}
}

// fields are the keys this version reads and writes, one entry each, in
// the order the writer writes them.
var fields = [...]field{
	{key: "ts", set: func(r *Row, v string, _ *parser) error {
		ts, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return fmt.Errorf("not an RFC 3339 time %q", truncate(v))
		}
		r.TS = ts.UTC()
		return CheckTS(r.TS)
	}, get: func(r *Row) (string, bool) { return r.TS.UTC().Format(time.RFC3339Nano), !r.TS.IsZero() }},
	{key: "job", set: func(r *Row, v string, _ *parser) error {
		if v == "" {
			return errors.New("empty job id")
		}
		r.Job = strings.Clone(v)
		return nil
	}, get: func(r *Row) (string, bool) { return r.Job, r.Job != "" }},
	whole("attempt", func(v string) (int, error) {
		n, err := admit.ParseCount(v)
		if err != nil || n < 1 || n > admit.MaxAttempts {
			return 0, fmt.Errorf("not an attempt number in 1…%d %q", admit.MaxAttempts, truncate(v))
		}
		return int(n), nil
	}, func(r *Row) (*int, *bool) { return &r.Attempt, nil }),
	text("seat", true, func(r *Row) *string { return &r.Seat }),
	text("model", true, func(r *Row) *string { return &r.Model }),
	seconds("wait_s", func(r *Row) (*time.Duration, *bool) { return &r.Wait, nil }),
	seconds("ttfb_s", func(r *Row) (*time.Duration, *bool) { return &r.TTFB, &r.HasTTFB }),
	seconds("connect_s", func(r *Row) (*time.Duration, *bool) { return &r.Connect, &r.HasConnect }),
	seconds("itl_mean_s", func(r *Row) (*time.Duration, *bool) { return &r.ITLMean, &r.HasITL }),
	seconds("itl_max_s", func(r *Row) (*time.Duration, *bool) { return &r.ITLMax, &r.HasITL }),
	seconds("elapsed_s", func(r *Row) (*time.Duration, *bool) { return &r.Elapsed, nil }),
	count("tokens", func(r *Row) (*int64, *bool) { return &r.Tokens, nil }),
	count("prompt_tokens", func(r *Row) (*int64, *bool) { return &r.PromptTokens, &r.HasSplit }),
	count("completion_tokens", func(r *Row) (*int64, *bool) { return &r.CompletionTokens, &r.HasSplit }),
	count("cached_tokens", func(r *Row) (*int64, *bool) { return &r.CachedTokens, &r.HasCached }),
	count("cache_write_tokens", func(r *Row) (*int64, *bool) { return &r.CacheWriteTokens, &r.HasCacheWrite }),
	count("reasoning_tokens", func(r *Row) (*int64, *bool) { return &r.ReasoningTokens, &r.HasReasoning }),
	{key: "tokens_from", set: func(r *Row, v string, p *parser) error {
		if !knownSource(v, true) {
			return fmt.Errorf("unknown source %q (want usage, tokenizer, estimate, script, hand or mixed)", truncate(v))
		}
		r.TokensFrom = p.str(v)
		return nil
	}, get: func(r *Row) (string, bool) { return r.TokensFrom, writesSources(r) }},
	{key: "prompt_tokens_from", set: func(r *Row, v string, p *parser) (err error) {
		r.PromptFrom, err = partSource(v, p)
		return err
	}, get: func(r *Row) (string, bool) { return r.PromptFrom, writesSources(r) && r.TokensFrom == FromMixed }},
	{key: "completion_tokens_from", set: func(r *Row, v string, p *parser) (err error) {
		r.CompletionFrom, err = partSource(v, p)
		return err
	}, get: func(r *Row) (string, bool) { return r.CompletionFrom, writesSources(r) && r.TokensFrom == FromMixed }},
	{key: "outcome", set: func(r *Row, v string, _ *parser) (err error) {
		r.Outcome, err = admit.ParseOutcome(v) // one of the package's constants, not v
		return err
	}, get: func(r *Row) (string, bool) {
		_, err := admit.ParseOutcome(string(r.Outcome))
		return string(r.Outcome), err == nil
	}},
	whole("http_status", func(v string) (int, error) {
		n, err := admit.ParseCount(v)
		if err != nil || n < 100 || n > 999 {
			return 0, fmt.Errorf("not an HTTP status %q", truncate(v))
		}
		return int(n), nil
	}, func(r *Row) (*int, *bool) { return &r.HTTPStatus, nil }),
	oneOf("billing", "billing", []admit.Billing{admit.Billable, admit.Free, admit.Ambiguous}, func(r *Row) *admit.Billing { return &r.Billing }),
	usd("cost_usd", func(r *Row) (*float64, *bool) { return &r.CostUSD, &r.HasCost }),
	usd("reserve_usd", func(r *Row) (*float64, *bool) { return &r.ReserveUSD, nil }),
	usd("uncached_usd", func(r *Row) (*float64, *bool) { return &r.UncachedUSD, nil }),
	seconds("retry_after_s", func(r *Row) (*time.Duration, *bool) { return &r.RetryAfter, &r.HasRetryAfter }),
	count("ratelimit_remaining_requests", func(r *Row) (*int64, *bool) {
		return &r.RateLimit.RemainingRequests, &r.RateLimit.HasRequests
	}),
	count("ratelimit_remaining_tokens", func(r *Row) (*int64, *bool) {
		return &r.RateLimit.RemainingTokens, &r.RateLimit.HasTokens
	}),
	seconds("ratelimit_reset_s", func(r *Row) (*time.Duration, *bool) { return &r.RateLimit.Reset, &r.RateLimit.HasReset }),
	text("error_code", true, func(r *Row) *string { return &r.ErrorCode }),
	seconds("delay_s", func(r *Row) (*time.Duration, *bool) { return &r.Delay, nil }),
	whole("window_firsts", windowCount, func(r *Row) (*int, *bool) { return &r.Window.Firsts, &r.HasWindow }),
	whole("window_retries", windowCount, func(r *Row) (*int, *bool) { return &r.Window.Retries, &r.HasWindow }),
	seconds("spent_s", func(r *Row) (*time.Duration, *bool) { return &r.SpentS, &r.HasSpent }),
	count("spent_tokens", func(r *Row) (*int64, *bool) { return &r.SpentTokens, &r.HasSpent }),
	// spent_usd does not make a row carry its spend (spent_s, spent_tokens
	// and used do), and is written only on a row that does.
	{key: "spent_usd", set: func(r *Row, v string, _ *parser) (err error) {
		r.SpentUSD, err = parseUSD(v)
		return err
	}, get: func(r *Row) (string, bool) {
		if !r.HasSpent || r.SpentUSD == 0 {
			return "", false
		}
		return formatUSD(r.SpentUSD), true
	}},
	whole("used", attemptCount, func(r *Row) (*int, *bool) { return &r.Used, &r.HasSpent }),
	whole("inflight", attemptCount, func(r *Row) (*int, *bool) { return &r.InFlight, nil }),
	{key: "decision", set: func(r *Row, v string, p *parser) error {
		if _, err := admit.ParseDecision(v); err != nil {
			return err
		}
		r.Decision = p.str(v)
		return nil
	}, get: func(r *Row) (string, bool) {
		_, err := admit.ParseDecision(r.Decision)
		return r.Decision, err == nil
	}},
	{key: "sent", set: func(r *Row, v string, _ *parser) error {
		b, err := parseBool(v)
		r.Unsent = !b
		return err
	}, get: func(r *Row) (string, bool) { return "false", r.Unsent }},
	{key: "would", set: func(r *Row, v string, p *parser) error {
		if err := ParseWould(v); err != nil {
			return err
		}
		r.Would = p.str(v)
		return nil
	}, get: func(r *Row) (string, bool) { return r.Would, ParseWould(r.Would) == nil }},
	flag("holdout", func(r *Row) *bool { return &r.Holdout }),
	flag("fallback", func(r *Row) *bool { return &r.Fallback }),
	oneOf("job_end", "job end", []string{JobSucceeded, JobFailed, JobUnknown, JobCancelled}, func(r *Row) *string { return &r.JobEnd }),
	text("prompt_sha", false, func(r *Row) *string { return &r.PromptSHA }),
	text("tags", false, func(r *Row) *string { return &r.Tags }),
	text("note", false, func(r *Row) *string { return &r.Note }),
}

// writesSources says whether the writer writes tokens_from (and, when it
// is mixed, the parts' sources): only sources the reader reads back.
func writesSources(r *Row) bool {
	return knownSource(r.TokensFrom, true) &&
		(r.TokensFrom != FromMixed || (knownSource(r.PromptFrom, false) && knownSource(r.CompletionFrom, false)))
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
		return "", fmt.Errorf("unknown source %q (want usage, tokenizer, estimate, script or hand)", truncate(v))
	}
	return p.str(v), nil
}

// parseSeconds reads seconds as the log writes them, in admit's number
// grammar (admit.ParseDecimal), to the reader's resolution (a
// microsecond, rounded half up), from the decimal digits themselves: no
// float in between, so what a row says is what the reader keeps.
func parseSeconds(s string) (time.Duration, error) {
	d, ok := admit.ParseDecimal(s)
	if !ok {
		return 0, fmt.Errorf("not a number %q", truncate(s))
	}
	n, ok := d.Scaled(resolutionDigits, uint64(admit.MaxDuration/ReadResolution))
	switch {
	case d.Neg && !d.Zero():
		return 0, fmt.Errorf("negative seconds %q", truncate(s))
	case !ok:
		return 0, fmt.Errorf("more than %.0f seconds %q", admit.MaxDuration.Seconds(), truncate(s))
	}
	return time.Duration(n) * ReadResolution, nil
}

// parseUSD reads an amount in admit's number grammar, as the double
// nearest the decimal written.
func parseUSD(s string) (float64, error) {
	d, ok := admit.ParseDecimal(s)
	f, err := strconv.ParseFloat(s, 64)
	if !ok || err != nil || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a number %q", truncate(s))
	}
	if d.Neg && !d.Zero() {
		return 0, fmt.Errorf("negative amount %q", truncate(s))
	}
	if f > admit.MaxUSD {
		return 0, fmt.Errorf("amount over %.0f %q", admit.MaxUSD, truncate(s))
	}
	return max(f, 0), nil // -0 is 0
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
func truncate(s string) string { return strings.Clone(admit.Shorten(s)) }

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
