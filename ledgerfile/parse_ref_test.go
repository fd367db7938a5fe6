package ledgerfile

// The reader's parser as it was before it was made fast: a plain two-pass
// tokenizer over time.Parse and strconv. FuzzParseLineMatchesReference
// holds the fast one to it, row for row and error for error.

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"retrygate/admit"
)

func parseLineRef(line []byte, row *Row) error {
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
		bit, err := setFieldRef(row, spans[i].key, spans[i].val)
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

func setFieldRef(row *Row, key, v []byte) (uint64, error) {
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
		n, err := parseCountRef(val)
		if err != nil || n < 1 || n > admit.MaxAttempts {
			return 0, fmt.Errorf("not an attempt number in 1…%d %q", admit.MaxAttempts, truncate(val))
		}
		row.Attempt = int(n)
		return bitAttempt, nil
	case "seat":
		row.Seat = string(v)
		return bitSeat, nil
	case "model":
		row.Model = string(v)
		return bitModel, nil
	case "wait_s":
		row.Wait, err = parseSecondsRef(val)
		return bitWait, err
	case "elapsed_s":
		row.Elapsed, err = parseSecondsRef(val)
		return bitElapsed, err
	case "ttfb_s":
		row.TTFB, err = parseSecondsRef(val)
		row.HasTTFB = true
		return bitTTFB, err
	case "tokens":
		row.Tokens, err = parseCountRef(val)
		return bitTokens, err
	case "prompt_tokens":
		row.PromptTokens, err = parseCountRef(val)
		row.HasSplit = true
		return bitPrompt, err
	case "completion_tokens":
		row.CompletionTokens, err = parseCountRef(val)
		row.HasSplit = true
		return bitCompletion, err
	case "tokens_from":
		if !knownSource(val, true) {
			return 0, fmt.Errorf("unknown source %q (want usage, tokenizer, script, hand or mixed)", truncate(val))
		}
		row.TokensFrom = string(v)
		return bitTokensFrom, nil
	case "prompt_tokens_from", "completion_tokens_from":
		if !knownSource(val, false) {
			return 0, fmt.Errorf("unknown source %q (want usage, tokenizer, script or hand)", truncate(val))
		}
		if key[0] == 'p' {
			row.PromptFrom = string(v)
			return bitPromptFrom, nil
		}
		row.CompletionFrom = string(v)
		return bitCompletionFrom, nil
	case "outcome":
		o, err := admit.ParseOutcome(val)
		row.Outcome = o // one of the package's constants, not val
		return bitOutcome, err
	case "http_status":
		n, err := parseCountRef(val)
		if err != nil || n < 100 || n > 999 {
			return 0, fmt.Errorf("not an HTTP status %q", truncate(val))
		}
		row.HTTPStatus = int(n)
		return bitStatus, nil
	case "billing":
		switch admit.Billing(val) {
		case admit.Billable, admit.Free, admit.Ambiguous:
			row.Billing = admit.Billing(string(v))
			return bitBilling, nil
		}
		return 0, fmt.Errorf("unknown billing %q (want billable, free or ambiguous)", truncate(val))
	case "cost_usd":
		row.CostUSD, err = parseUSD(val)
		row.HasCost = true
		return bitCost, err
	case "connect_s":
		row.Connect, err = parseSecondsRef(val)
		row.HasConnect = true
		return bitConnect, err
	case "itl_mean_s":
		row.ITLMean, err = parseSecondsRef(val)
		row.HasITL = true
		return bitITLMean, err
	case "itl_max_s":
		row.ITLMax, err = parseSecondsRef(val)
		row.HasITL = true
		return bitITLMax, err
	case "reserve_usd":
		row.ReserveUSD, err = parseUSD(val)
		return bitReserve, err
	case "retry_after_s":
		row.RetryAfter, err = parseSecondsRef(val)
		row.HasRetryAfter = true
		return bitRetryAfter, err
	case "error_code":
		row.ErrorCode = string(v)
		return bitErrorCode, nil
	case "delay_s":
		row.Delay, err = parseSecondsRef(val)
		return bitDelay, err
	case "spent_s":
		row.SpentS, err = parseSecondsRef(val)
		row.HasSpent = true
		return bitSpentS, err
	case "spent_tokens":
		row.SpentTokens, err = parseCountRef(val)
		row.HasSpent = true
		return bitSpentTokens, err
	case "spent_usd":
		row.SpentUSD, err = parseUSD(val)
		return bitSpentUSD, err
	case "used":
		n, err := parseCountRef(val)
		if err != nil || n > admit.MaxAttempts {
			return 0, fmt.Errorf("not a count of attempts in 0…%d %q", admit.MaxAttempts, truncate(val))
		}
		row.Used = int(n)
		row.HasSpent = true
		return bitUsed, nil
	case "inflight":
		n, err := parseCountRef(val)
		if err != nil || n > admit.MaxAttempts {
			return 0, fmt.Errorf("not a count of attempts in 0…%d %q", admit.MaxAttempts, truncate(val))
		}
		row.InFlight = int(n)
		return bitInFlight, nil
	case "decision":
		if _, err := admit.ParseDecision(val); err != nil {
			return 0, err
		}
		row.Decision = string(v)
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
			row.JobEnd = string(v)
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

func parseSecondsRef(s string) (time.Duration, error) {
	if d, ok := decimalSecondsRef(s); ok {
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
func decimalSecondsRef(s string) (d time.Duration, ok bool) {
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

// parseCountRef is the one count rule (admit.ParseCount): the reference
// checks the line's syntax and the reader's fast path for plain digits,
// not a second reading of a count.
func parseCountRef(s string) (int64, error) { return admit.ParseCount(s) }

// span is one key=value pair as offsets into the line; quoted values with
// escapes are unquoted into val.
type span struct {
	key    []byte
	val    []byte
	vs     int  // offset of an unquoted value in the line
	quoted bool // a quoted value takes no bare words after it
}

// FuzzParseLineMatchesReference holds the fast parser to the reference:
// the same row for every line the reference reads, the same error text
// for every line it refuses. Each line is parsed twice through one
// interner, so the remembered strings are exercised too.
func FuzzParseLineMatchesReference(f *testing.F) {
	for _, s := range []string{
		"wait_s=18.0 elapsed_s=9.0 tokens=2400 decision=refuse: queue wait",
		`ts=2026-11-30T23:15:50.306395512Z job=r1-000047 attempt=1 seat=s model=bench-mini wait_s=0.500 ttfb_s=0.120 itl_mean_s=0.008 itl_max_s=0.008 elapsed_s=3.660 tokens=1876 prompt_tokens=1462 completion_tokens=414 tokens_from=script outcome=ok http_status=200 billing=billable spent_s=0.000 spent_tokens=0 used=0 decision=admit job_end=succeeded prompt_sha=bd049bb2fd2e`,
		`ts=2026-11-30T10:00:00Z job=a attempt=1 wait_s=1.200 elapsed_s=7.200 tokens=2100 note="a \"b\""`,
		"ts=2024-02-29T00:00:00Z wait_s=1 elapsed_s=1 tokens=1",
		"ts=2023-02-29T00:00:00Z wait_s=1 elapsed_s=1 tokens=1",
		"ts=2026-11-30T23:59:60Z wait_s=1 elapsed_s=1 tokens=1",
		"ts=2026-11-30T23:59:59.1234567891Z wait_s=1 elapsed_s=1 tokens=1",
		"ts=2026-11-30T23:59:59,5Z wait_s=1 elapsed_s=1 tokens=1",
		"ts=2026-11-30T23:59:59.5+01:00 wait_s=1 elapsed_s=1 tokens=1",
		"ts=0001-01-01T00:00:00Z wait_s=1 elapsed_s=1 tokens=1",
		"wait_s=1\x00 elapsed_s=1 tokens=1",
		"wait_s=1\telapsed_s=1\ttokens=1 tokens=2",
		"\uFEFFts=2026-01-01T00:00:00Z wait_s=1 elapsed_s=1 tokens=1",
		"wait_s=1000000000 elapsed_s=1 tokens=9007199254740991 spent_tokens=9007199254740992 cost_usd=1e12 retry_after_s=9223372036.854",
		"wait_s=1 elapsed_s=1 tokens=3 tokens_from=mixed prompt_tokens_from=usage completion_tokens_from=tokenizer",
		"wait_s=+1 elapsed_s=.5 tokens=007 attempt=0 used=-0 x=\"\\u00e9\" y= z",
		"wait_s=1 elapsed_s=1 tokens=1 bad=x\"y",
		// checkBytes looks at 32 bytes a step: a control byte or a tab in
		// each of a step's four words, past a clean step, and non-ASCII
		// after one.
		"wait_s=1 elapsed_s=1 tokens=1 note=abcdefghijklmnopqrstuvwxyz\x01 x=1",
		"wait_s=1 elapsed_s=1 tokens=1 ab=\x7f\x1fcdefghijklmnopqrstuvwxyz0123456789",
		"wait_s=1 elapsed_s=1 tokens=1 abcdefgh=ijklmnopqrs\ttuvwxyz0123456789ABCDEF",
		"wait_s=1 elapsed_s=1 tokens=1 seat=abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH\u00e9 x=\xff",
		"ts=0000-01-01T00:00:00Z wait_s=1 elapsed_s=1 tokens=1",
		"ts=0000-03-01T00:00:00.5Z wait_s=1 elapsed_s=1 tokens=1",
		"ts=9999-12-31T23:59:59.999999999Z wait_s=1 elapsed_s=1 tokens=1",
		"ts=2100-02-29T00:00:00Z wait_s=1 elapsed_s=1 tokens=1",
		"ts=2000-02-29T12:00:00Z wait_s=1 elapsed_s=1 tokens=1",
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte("ts=2026-11-30T23:15:50Z job job=x attempt=1 seat=s modelx=1 wait_s=1 elapsed_s=1 tokens=1"))
	f.Add([]byte(`ts="2026-11-30T23:15:50Z" jobs=x job=x attempt=1 seat="s t" wait_s=1 elapsed_s=1 tokens=1 tokens=1`))
	primer := []byte(`ts=2026-11-30T23:15:50.306395512Z job=r1-000047 attempt=1 seat=s model=bench-mini wait_s=0.500 ttfb_s=0.120 itl_mean_s=0.008 itl_max_s=0.008 elapsed_s=3.660 tokens=1876 prompt_tokens=1462 completion_tokens=414 tokens_from=script outcome=ok http_status=200 billing=billable spent_s=0.000 spent_tokens=0 used=0 decision=admit job_end=succeeded prompt_sha=bd049bb2fd2e`)
	f.Fuzz(func(t *testing.T, line []byte) {
		var want Row
		werr := parseLineRef(line, &want)
		in := newInterner()
		var primed Row
		if err := parseLine(primer, &primed, in); err != nil {
			t.Fatal(err)
		}
		// After a line of the writer's, whose keys the parser then
		// expects in its order; then after line itself, twice.
		for pass := range 3 {
			var got Row
			gerr := parseLine(line, &got, in)
			if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
				t.Fatalf("pass %d: %q: error %v, reference %v", pass, line, gerr, werr)
			}
			if gerr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("pass %d: %q:\n got %+v\nwant %+v", pass, line, got, want)
			}
		}
	})
}

// Every known key has a slot of its own in keyTable, and is found there;
// no other word is.
func TestKeyHashPlacesEveryKnownKey(t *testing.T) {
	if len(keyNames)-1 != len(knownKeys) {
		t.Fatalf("keyNames has %d keys, knownKeys %d", len(keyNames)-1, len(knownKeys))
	}
	slots := map[int]string{}
	for id, k := range keyNames[1:] {
		if !knownKeys[k] {
			t.Errorf("%s is not in knownKeys", k)
		}
		if other, ok := slots[keyHash(k)]; ok {
			t.Errorf("%s and %s share slot %d", k, other, keyHash(k))
		}
		slots[keyHash(k)] = k
		if got := keyID([]byte(k)); got != id+1 {
			t.Errorf("keyID(%s) = %d, want %d", k, got, id+1)
		}
	}
	for _, w := range []string{"", "t", "x", "tsx", "Ts", "job_", "tokens_fro", "wait_S", "\uFEFFts"} {
		if id := keyID([]byte(w)); id != keyUnknown {
			t.Errorf("keyID(%q) = %d, want unknown", w, id)
		}
	}
}

// wordEnd finds what a byte-by-byte scan finds, for every byte value at
// every place in a word, after any run of word bytes.
func TestWordEndIsTheBytewiseScan(t *testing.T) {
	bytewise := func(line []byte, p int) int {
		for p < len(line) && line[p] > ' ' && line[p] != '=' && line[p] != '"' {
			p++
		}
		return p
	}
	for n := range 20 {
		for at := 0; at <= n; at++ {
			for c := range 256 {
				line := bytes.Repeat([]byte{'a' | 0x80*byte(at&1)}, n)
				if at < n {
					line[at] = byte(c)
				}
				for p := 0; p <= min(n, 3); p++ {
					if got, want := wordEnd(line, p), bytewise(line, p); got != want {
						t.Fatalf("wordEnd(%q, %d) = %d, want %d", line, p, got, want)
					}
				}
			}
		}
	}
}
