package ledgerfile

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-logfmt/logfmt"

	"github.com/retrygate/retrygate/admit"
)

// MaxValue is the longest string value (bytes, before quoting) the writer
// writes: a job id, seat, model, note or unknown key's value past it is cut
// at a rune boundary, so a row always fits in MaxLine.
const MaxValue = 4096

// MaxKeys is the most keys one row may carry, known and unknown together.
const MaxKeys = 64

// maxKeyLen bounds an unknown key the writer writes back; with MaxValue
// and MaxKeys it keeps every row the writer writes within MaxLine.
const maxKeyLen = 256

// The times a log holds: ts outside [MinTS, MaxTS] is refused by the
// reader and clamped by the writer (RFC 3339 has four-digit years).
var (
	MinTS = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTS = time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC)
)

// CheckTS says why t cannot be a row's ts, or nil.
func CheckTS(t time.Time) error {
	if t.Before(MinTS) || t.After(MaxTS) {
		return fmt.Errorf("time %s is outside %s … %s", t.UTC().Format(time.RFC3339Nano), MinTS.Format(time.RFC3339), MaxTS.Format("2006-01-02"))
	}
	return nil
}

// Check reports a value the log has no word for: an outcome, billing class,
// decision, token source or job end that the writer would leave out (its
// field's get) and the reader refuses, by the reader's own error. The
// writer refuses such a row (a bug in its caller) rather than write it;
// every other field is brought into range by Normalize.
func Check(r *Row) error {
	if r.TokensFrom == FromMixed && (r.PromptFrom == "" || r.CompletionFrom == "") {
		return errors.New("tokens_from: mixed needs prompt_tokens_from and completion_tokens_from")
	}
	for _, k := range wordKeys {
		f := &fields[fieldIndex[k]]
		if v, ok := f.get(r); !ok && v != "" {
			if err := f.set(&Row{}, v, newParser()); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	return nil
}

// wordKeys are the keys whose values are words of the log's (Check).
var wordKeys = [...]string{"outcome", "billing", "decision", "would", "tokens_from", "prompt_tokens_from", "completion_tokens_from", "job_end"}

func knownSource(s string, mixedOK bool) bool {
	switch s {
	case FromUsage, FromTokenizer, FromScript, FromHand, FromEstimate:
		return true
	case FromMixed:
		return mixedOK
	}
	return false
}

// Normalize brings every field of r into what the reader accepts: counts,
// durations and amounts are clamped to admit's limits (durations rounded
// to the millisecond the log keeps), ts to [MinTS, MaxTS], strings made
// valid UTF-8 and cut to MaxValue, the token sources folded (tokens_from
// is one word when both parts agree, mixed when they differ), unknown keys
// that could not be read back dropped. Values Check refuses are left alone.
func Normalize(r *Row) {
	if !r.TS.IsZero() {
		r.TS = r.TS.UTC()
		if r.TS.Before(MinTS) {
			r.TS = MinTS
		} else if r.TS.After(MaxTS) {
			r.TS = MaxTS
		}
	}
	r.Attempt = min(max(r.Attempt, 0), admit.MaxAttempts)
	r.Used = min(max(r.Used, 0), admit.MaxAttempts)
	r.Window.Firsts = min(max(r.Window.Firsts, 0), maxWindowCount)
	r.Window.Retries = min(max(r.Window.Retries, 0), maxWindowCount)
	r.InFlight = min(max(r.InFlight, 0), admit.MaxAttempts)
	for _, d := range [...]*time.Duration{&r.Wait, &r.Elapsed, &r.TTFB, &r.Connect, &r.ITLMean, &r.ITLMax, &r.RetryAfter, &r.RateLimit.Reset, &r.Delay, &r.SpentS} {
		*d = Resolution(*d)
	}
	for _, n := range [...]*int64{&r.Tokens, &r.PromptTokens, &r.CompletionTokens, &r.CachedTokens, &r.CacheWriteTokens, &r.ReasoningTokens, &r.RateLimit.RemainingRequests, &r.RateLimit.RemainingTokens, &r.SpentTokens} {
		*n = admit.ClampTokens(*n)
	}
	r.CostUSD, r.SpentUSD, r.UncachedUSD = admit.ClampUSD(r.CostUSD), admit.ClampUSD(r.SpentUSD), admit.ClampUSD(r.UncachedUSD)
	if r.HTTPStatus < 100 || r.HTTPStatus > 999 {
		r.HTTPStatus = 0
	}
	for _, s := range [...]*string{&r.Job, &r.Seat, &r.Model, &r.ErrorCode, &r.PromptSHA, &r.Tags, &r.Note, &r.Decision, &r.Would} {
		*s = cleanValue(*s)
	}
	foldSources(r)
	if len(r.Extra) > 0 {
		extra := make([]KV, 0, len(r.Extra))
		seen := map[string]bool{}
		for _, e := range r.Extra {
			if !validExtraKey(e.Key) || seen[e.Key] || len(extra) >= MaxKeys-knownKeyCount {
				continue
			}
			seen[e.Key] = true
			extra = append(extra, KV{e.Key, cleanValue(e.Value)})
		}
		r.Extra = extra
	}
}

// foldSources keeps tokens_from a single word when both token counts came
// from one place, and names each part's source when they did not.
func foldSources(r *Row) {
	if r.PromptFrom == "" && r.CompletionFrom == "" {
		return
	}
	if r.TokensFrom != FromMixed {
		// tokens_from is each part's source unless the part names its own.
		if r.PromptFrom == "" {
			r.PromptFrom = r.TokensFrom
		}
		if r.CompletionFrom == "" {
			r.CompletionFrom = r.TokensFrom
		}
	}
	// A part with no source shares the other's.
	if r.PromptFrom == "" {
		r.PromptFrom = r.CompletionFrom
	}
	if r.CompletionFrom == "" {
		r.CompletionFrom = r.PromptFrom
	}
	if r.PromptFrom == r.CompletionFrom {
		r.TokensFrom, r.PromptFrom, r.CompletionFrom = r.PromptFrom, "", ""
	} else {
		r.TokensFrom = FromMixed
	}
}

// cleanValue makes s valid UTF-8 (each bad byte becomes U+FFFD, as the
// encoder would write it) and cuts it to MaxValue bytes at a rune boundary.
func cleanValue(s string) string {
	if !utf8.ValidString(s) {
		var b strings.Builder
		for i := 0; i < len(s); {
			c, n := utf8.DecodeRuneInString(s[i:])
			if c == utf8.RuneError && n == 1 {
				b.WriteRune(utf8.RuneError)
			} else {
				b.WriteString(s[i : i+n])
			}
			i += n
			if b.Len() > MaxValue {
				break
			}
		}
		s = b.String()
	}
	if len(s) > MaxValue {
		cut := MaxValue
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// validExtraKey is an unknown key the reader will read back as itself.
func validExtraKey(k string) bool { return writableKey(k) && !knownKey(k) }

// writableKey is a key a line can carry and a reader read back: a
// logfmt word of at most maxKeyLen bytes, without a byte order mark.
func writableKey(k string) bool {
	return len(k) <= maxKeyLen && logfmtKey(k) && !strings.Contains(k, bom)
}

// AppendRow appends r as one logfmt line, newline included, to dst. The
// row is normalized first (see Normalize), and a value Check refuses is
// left out, so the line is always one the reader accepts. Keys come in a
// fixed order so that a reviewer's eye finds them; absent values are left
// out.
func AppendRow(dst []byte, r *Row) []byte {
	n := *r
	Normalize(&n)
	return appendNormalized(dst, &n)
}

// appendNormalized is AppendRow for a row already normalized; it may
// drop n's unknown keys to keep the line within MaxLine.
func appendNormalized(dst []byte, n *Row) []byte {
	start := len(dst)
	for {
		dst = appendRow(dst[:start], n)
		if len(dst)-start <= MaxLine+1 || len(n.Extra) == 0 {
			return dst
		}
		n.Extra = n.Extra[:len(n.Extra)/2] // keep the line readable: drop unknown keys
	}
}

// appendRow writes the row's keys in fields' order, then its unknown
// keys, with go-logfmt's Encoder: a key or value it refuses (an unknown
// key that is not a word) is left out.
func appendRow(dst []byte, r *Row) []byte {
	buf := bytes.NewBuffer(dst)
	enc := logfmt.NewEncoder(buf)
	keys := fieldKeys()
	for i := range fields {
		if v, ok := fields[i].get(r); ok {
			_ = enc.EncodeKeyval(keys[i], v)
		}
	}
	for _, x := range r.Extra {
		_ = enc.EncodeKeyval(x.Key, x.Value)
	}
	_ = enc.EndRecord()
	return buf.Bytes()
}

// fieldKeys are fields' keys as the Encoder takes them: made an any
// once, at the first row written (not at start-up: `--version` writes
// none), not once a key a row.
var fieldKeys = sync.OnceValue(func() (keys *[len(fields)]any) {
	keys = new([len(fields)]any)
	for i := range fields {
		keys[i] = fields[i].key
	}
	return keys
})

// FormatRow is AppendRow into a new string, without the newline.
func FormatRow(r *Row) string {
	b := AppendRow(nil, r)
	return string(b[:len(b)-1])
}

// appendSeconds writes d as seconds with exactly 3 decimals (the
// WriteResolution): 1.2s → "1.200".
func appendSeconds(dst []byte, d time.Duration) []byte {
	ms := d.Round(WriteResolution).Milliseconds()
	if ms < 0 {
		dst = append(dst, '-')
		ms = -ms
	}
	dst = strconv.AppendInt(dst, ms/1000, 10)
	frac := ms % 1000
	dst = append(dst, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	return dst
}

// FormatSeconds is the log's way of writing a duration: "7.200".
func FormatSeconds(d time.Duration) string { return string(appendSeconds(nil, d)) }

func formatUSD(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// WriteResolution is the unit the writer writes durations in: seconds
// with 3 decimals (DESIGN.md). Every store of rows keeps them at it
// (pgstore's *_ms columns), and the attempt loop decides on durations
// rounded to it (Resolution), so a replay of its log sees what it saw.
const WriteResolution = time.Millisecond

// ReadResolution is the finest duration the reader keeps: a row written
// by hand with more decimals than the writer writes (wait_s=0.0004) is
// read to the microsecond, rounded half up past it, and every figure of
// a summary counts it so (docs/log.md).
const ReadResolution = time.Microsecond

// resolutionDigits is ReadResolution as decimals of a second.
const resolutionDigits = 6

// Resolution rounds d to what the writer writes (WriteResolution) and
// into [0, admit.MaxDuration]. The attempt loop decides on rounded
// numbers, so a replay of its log sees exactly what it saw.
func Resolution(d time.Duration) time.Duration { return roundIn(d, WriteResolution) }

// Kept is d as the reader keeps it: rounded to ReadResolution (half up,
// as the reader rounds a written decimal) and into [0, admit.MaxDuration].
// A row built in memory is counted by a summary as its line would be read.
func Kept(d time.Duration) time.Duration { return roundIn(d, ReadResolution) }

// roundIn is admit.ClampDuration(d.Round(unit)), a unit that divides
// admit.MaxDuration: the loop rounds every duration of every row, and a
// division by a constant unit costs a multiplication.
func roundIn(d, unit time.Duration) time.Duration {
	switch {
	case d <= 0:
		return 0
	case d >= admit.MaxDuration:
		return admit.MaxDuration
	}
	return (d + unit/2) / unit * unit // half away from zero, as Round
}

// Pairs is r's keys and values as the writer writes them, in its order,
// Extra included: a store that keeps some keys in columns of its own
// keeps the rest as these (SetField reads them back).
func Pairs(r *Row) []KV {
	d := logfmt.NewDecoder(bytes.NewReader(AppendRow(nil, r)))
	var kvs []KV
	for d.ScanRecord() {
		for d.ScanKeyval() {
			kvs = append(kvs, KV{Key: string(d.Key()), Value: string(d.Value())})
		}
	}
	return kvs
}
