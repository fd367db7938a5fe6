package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
)

// rowsGen draws a log's rows as the writer may write them: every v1 key,
// keys a later version might add, hand-written rows without a job, and
// text that needs quoting; (job, attempt) pairs are unique.
func rowsGen() *rapid.Generator[[]ledgerfile.Row] {
	word := rapid.StringMatching(`[a-z0-9_.:-]{1,12}`)
	// Any text but NUL, which PostgreSQL's text cannot hold (import
	// refuses it by name; see TestImportRefuses).
	text := rapid.StringOf(rapid.RuneFrom(nil, &unicodeNoNUL))
	ms := func(t *rapid.T, label string) time.Duration {
		return time.Duration(rapid.Int64Range(0, 1e9).Draw(t, label)) * time.Millisecond
	}
	opt := func(t *rapid.T, label string, g *rapid.Generator[string]) string {
		if rapid.Bool().Draw(t, label+"?") {
			return g.Draw(t, label)
		}
		return ""
	}
	row := func(t *rapid.T, job string, attempt int) ledgerfile.Row {
		r := ledgerfile.Row{Job: job, Attempt: attempt,
			Seat: opt(t, "seat", word), Model: opt(t, "model", text),
			Wait: ms(t, "wait"), Elapsed: ms(t, "elapsed"),
			Tokens:     rapid.Int64Range(0, admit.MaxTokens).Draw(t, "tokens"),
			TokensFrom: rapid.SampledFrom([]string{"", "usage", "tokenizer", "script", "hand"}).Draw(t, "from"),
			ErrorCode:  opt(t, "error_code", word), PromptSHA: opt(t, "sha", rapid.StringMatching(`[0-9a-f]{12}`)),
			Note: opt(t, "note", text), Delay: ms(t, "delay"),
			Unsent: rapid.Bool().Draw(t, "unsent"), Holdout: rapid.Bool().Draw(t, "holdout"), Fallback: rapid.Bool().Draw(t, "fallback"),
			JobEnd: rapid.SampledFrom([]string{"", ledgerfile.JobSucceeded, ledgerfile.JobFailed, ledgerfile.JobUnknown, ledgerfile.JobCancelled}).Draw(t, "end"),
		}
		if rapid.Bool().Draw(t, "ts?") {
			r.TS = time.Unix(rapid.Int64Range(0, 4e9).Draw(t, "ts"), rapid.Int64Range(0, 1e9-1).Draw(t, "ns")).UTC()
		}
		if rapid.Bool().Draw(t, "ttfb?") {
			r.TTFB, r.HasTTFB = ms(t, "ttfb"), true
		}
		if rapid.Bool().Draw(t, "split?") {
			r.PromptTokens, r.CompletionTokens, r.HasSplit = rapid.Int64Range(0, admit.MaxTokens).Draw(t, "p"), rapid.Int64Range(0, admit.MaxTokens).Draw(t, "c"), true
		}
		if rapid.Bool().Draw(t, "outcome?") {
			r.Outcome = rapid.SampledFrom(admit.Outcomes).Draw(t, "outcome")
			r.Billing = rapid.SampledFrom([]admit.Billing{admit.Billable, admit.Free, admit.Ambiguous}).Draw(t, "billing")
		}
		if rapid.Bool().Draw(t, "status?") {
			r.HTTPStatus = rapid.IntRange(100, 999).Draw(t, "status")
		}
		if rapid.Bool().Draw(t, "cost?") {
			r.CostUSD, r.HasCost = rapid.Float64Range(0, 1e6).Draw(t, "cost"), true
		}
		if rapid.Bool().Draw(t, "uncached?") {
			r.UncachedUSD = rapid.Float64Range(1e-9, 1e6).Draw(t, "uncached")
		}
		if rapid.Bool().Draw(t, "retry_after?") {
			r.RetryAfter, r.HasRetryAfter = ms(t, "retry_after"), true
		}
		// Keys without a column of their own ride in extra.
		if rapid.Bool().Draw(t, "reserve?") {
			r.ReserveUSD = rapid.Float64Range(1e-9, 1e6).Draw(t, "reserve")
		}
		if r.HasConnect = rapid.Bool().Draw(t, "connect?"); r.HasConnect {
			r.Connect = ms(t, "connect")
		}
		if r.HasITL = rapid.Bool().Draw(t, "itl?"); r.HasITL {
			r.ITLMean, r.ITLMax = ms(t, "itl_mean"), ms(t, "itl_max")
		}
		r.Tags = opt(t, "tags", word)
		r.InFlight = rapid.IntRange(0, 3).Draw(t, "inflight")
		if r.HasWindow = rapid.Bool().Draw(t, "window?"); r.HasWindow {
			r.Window.Firsts, r.Window.Retries = rapid.IntRange(0, 1000).Draw(t, "firsts"), rapid.IntRange(0, 1000).Draw(t, "retries")
		}
		if r.TokensFrom == "" && rapid.Bool().Draw(t, "mixed?") {
			r.TokensFrom, r.PromptFrom, r.CompletionFrom = ledgerfile.FromMixed, "usage", "tokenizer"
		}
		if rapid.Bool().Draw(t, "unknown key?") {
			r.Extra = append(r.Extra, ledgerfile.KV{Key: "x_later", Value: "kept as is"})
		}
		count := rapid.Int64Range(0, admit.MaxTokens)
		if r.HasCached = rapid.Bool().Draw(t, "cached?"); r.HasCached {
			r.CachedTokens = count.Draw(t, "cached")
		}
		if r.HasCacheWrite = rapid.Bool().Draw(t, "write?"); r.HasCacheWrite {
			r.CacheWriteTokens = count.Draw(t, "write")
		}
		if r.HasReasoning = rapid.Bool().Draw(t, "reasoning?"); r.HasReasoning {
			r.ReasoningTokens = count.Draw(t, "reasoning")
		}
		if r.RateLimit.HasRequests = rapid.Bool().Draw(t, "rl_requests?"); r.RateLimit.HasRequests {
			r.RateLimit.RemainingRequests = count.Draw(t, "rl_requests")
		}
		if r.RateLimit.HasTokens = rapid.Bool().Draw(t, "rl_tokens?"); r.RateLimit.HasTokens {
			r.RateLimit.RemainingTokens = count.Draw(t, "rl_tokens")
		}
		if r.RateLimit.HasReset = rapid.Bool().Draw(t, "rl_reset?"); r.RateLimit.HasReset {
			r.RateLimit.Reset = ms(t, "rl_reset")
		}
		if rapid.Bool().Draw(t, "spent?") {
			r.SpentS, r.SpentTokens, r.Used, r.HasSpent = ms(t, "spent_s"), rapid.Int64Range(0, admit.MaxTokens).Draw(t, "st"), rapid.IntRange(0, 1<<20).Draw(t, "used"), true
			r.SpentUSD = rapid.SampledFrom([]float64{0, 0.25, 1e-9, 123.456}).Draw(t, "spent_usd")
		}
		if rapid.Bool().Draw(t, "decided?") {
			r.Decision = rapid.SampledFrom([]string{"admit", "refuse: queue wait", "refuse: attempt cap", "refuse: some later reason"}).Draw(t, "decision")
		}
		for i := rapid.IntRange(0, 3).Draw(t, "extras"); i > 0; i-- {
			r.Extra = append(r.Extra, ledgerfile.KV{Key: rapid.StringMatching(`x_[a-z]{1,6}`).Draw(t, "key"), Value: text.Draw(t, "value")})
		}
		return r
	}
	return rapid.Custom(func(t *rapid.T) []ledgerfile.Row {
		var rows []ledgerfile.Row
		next := map[string]int{}
		for i := rapid.IntRange(1, 12).Draw(t, "rows"); i > 0; i-- {
			job := ""
			if rapid.IntRange(0, 5).Draw(t, "hand") > 0 {
				job = rapid.SampledFrom([]string{"a", "b c", `q"uote`, "é"}).Draw(t, "job")
			}
			attempt := 0
			if job != "" {
				next[job]++
				attempt = next[job]
			}
			rows = append(rows, row(t, job, attempt))
		}
		return rows
	})
}

// unicodeNoNUL is every rune but NUL (and the surrogates, which are not runes).
var unicodeNoNUL = unicode.RangeTable{
	R16: []unicode.Range16{{Lo: 1, Hi: 0xD7FF, Stride: 1}, {Lo: 0xE000, Hi: 0xFFFD, Stride: 1}},
	R32: []unicode.Range32{{Lo: 0x10000, Hi: 0x10FFFF, Stride: 1}},
}

// File → import → export → file gives identical bytes.
func TestRoundTripFileImportExport(t *testing.T) {
	s, _ := open(t, Options{})
	ctx := context.Background()
	dir := t.TempDir()
	i := 0
	rapid.Check(t, func(rt *rapid.T) {
		i++
		rows := rowsGen().Draw(rt, "rows")
		path := filepath.Join(dir, fmt.Sprintf("%d.log", i))
		w := ledgerfile.NewWriter(path, false)
		if rapid.Bool().Draw(rt, "comment") {
			require.NoError(rt, w.Comment("run r1 policy=abc"))
		}
		require.NoError(rt, w.Append(rows...))
		require.NoError(rt, w.Close())
		before, err := os.ReadFile(path)
		require.NoError(rt, err)

		_, err = s.pool.Exec(ctx, `TRUNCATE retrygate_rows`)
		require.NoError(rt, err)
		f, err := os.Open(path)
		require.NoError(rt, err)
		n, err := s.Import(ctx, store.Entries(f, path))
		f.Close()
		require.NoError(rt, err)
		require.Equal(rt, int64(len(rows)), n)
		var after bytes.Buffer
		require.NoError(rt, store.Export(ctx, s, &after))
		if !bytes.Equal(before, after.Bytes()) {
			rt.Fatalf("round trip differs\nfile:   %q\nexport: %q", before, after.String())
		}
	})
}

func TestImportRefusesDuplicatesAndNUL(t *testing.T) {
	s, _ := open(t, Options{})
	ctx := context.Background()
	line := "job=a attempt=1 wait_s=1.000 elapsed_s=2.000 tokens=3\n"
	n, err := s.Import(ctx, store.Entries(strings.NewReader(line), "one.log"))
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)

	// The same (job, attempt) again, from another file: refused, and
	// nothing of that file is loaded.
	_, err = s.Import(ctx, store.Entries(strings.NewReader("job=b attempt=1 wait_s=1 elapsed_s=1 tokens=1\n"+line), "two.log"))
	require.ErrorIs(t, err, store.ErrDuplicate)
	assert.Contains(t, err.Error(), "(a, 1)")
	rows, err := s.ReadJob(ctx, "")
	require.NoError(t, err)
	assert.Len(t, rows, 1, "all or nothing")

	// Within one file, the reader refuses it, naming both lines.
	_, err = s.Import(ctx, store.Entries(strings.NewReader("job=c attempt=1 wait_s=1 elapsed_s=1 tokens=1\njob=c attempt=1 wait_s=1 elapsed_s=1 tokens=1\n"), "three.log"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "three.log: line 2: duplicate attempt")

	_, err = s.Import(ctx, store.Entries(strings.NewReader("wait_s=1 elapsed_s=1 tokens=1 note=\"a\\u0000b\"\n"), "nul.log"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 1: note: a NUL character")
}
