package ledgerfile

import (
	"bytes"
	"testing"

	"github.com/go-logfmt/logfmt"
	"pgregory.net/rapid"
)

// reencode reads a line with the logfmt library's decoder and writes it
// again with its encoder: the library's own bytes for the same pairs.
func reencode(t *rapid.T, line []byte) []byte {
	var out bytes.Buffer
	dec := logfmt.NewDecoder(bytes.NewReader(line))
	enc := logfmt.NewEncoder(&out)
	for dec.ScanRecord() {
		for dec.ScanKeyval() {
			if err := enc.EncodeKeyval(string(dec.Key()), string(dec.Value())); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
		}
		_ = enc.EndRecord()
	}
	if err := dec.Err(); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return out.Bytes()
}

// The row encoder writes exactly the bytes the logfmt library's encoder
// writes for the same keys and values: quoting, escapes, U+FFFD for bad
// UTF-8, "null", empty values and unknown keys.
func TestRowEncoderMatchesLogfmt(t *testing.T) {
	odd := rapid.SampledFrom([]string{"", "null", "a b", "a=b", `q"q`, "tab\there", "nl\nx", "\x7f", "\xff\xfe", "caf\u00e9", "\ufffd", `back\slash`, "refuse: deadline"})
	rapid.Check(t, func(t *rapid.T) {
		r := rowGen().Draw(t, "row")
		text := rapid.OneOf(odd, rapid.String())
		r.Model = text.Draw(t, "model")
		r.Tags = text.Draw(t, "tags")
		r.ErrorCode = text.Draw(t, "error_code")
		for i, n := 0, rapid.IntRange(0, 3).Draw(t, "extras"); i < n; i++ {
			r.Extra = append(r.Extra, KV{Key: rapid.OneOf(rapid.StringMatching(`[a-z_]{1,8}`), rapid.String()).Draw(t, "key"), Value: text.Draw(t, "value")})
		}
		line := AppendRow(nil, &r)
		if want := reencode(t, line); !bytes.Equal(line, want) {
			t.Fatalf("row encoder:\n%q\nlogfmt:\n%q", line, want)
		}
	})
}

// BenchmarkAppendRow is one rehearsed attempt's row, encoded.
func BenchmarkAppendRow(b *testing.B) {
	r := batchRow("r1-00042", 1)
	r.HasTTFB, r.HasSplit, r.HasSpent, r.PromptTokens, r.CompletionTokens = true, true, true, 20, 10
	r.TokensFrom, r.PromptSHA, r.JobEnd, r.HTTPStatus = FromUsage, "bd049bb2fd2e", JobSucceeded, 200
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRow(buf[:0], &r)
	}
}
