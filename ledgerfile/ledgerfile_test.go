package ledgerfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/retrygate/retrygate/admit"
)

func TestSeedHandLine(t *testing.T) {
	var r Row
	require.NoError(t, ParseLine([]byte("wait_s=18.0 elapsed_s=9.0 tokens=2400 decision=refuse: queue wait"), &r))
	assert.Equal(t, "refuse: queue wait", r.Decision)
	assert.Equal(t, 18*time.Second, r.Wait)
	assert.Equal(t, int64(2400), r.Tokens)
	assert.False(t, r.WasSent(), "a refused hand row with no outcome was not sent")
	assert.Equal(t, `wait_s=18.000 elapsed_s=9.000 tokens=2400 decision="refuse: queue wait"`, FormatRow(&r))
}

// A shadow proxy's row says what the policy would have done beside the
// pass-through's own decision; the hand-written form reads it too.
func TestWouldKey(t *testing.T) {
	var r Row
	require.NoError(t, ParseLine([]byte("wait_s=1 elapsed_s=2 tokens=3 decision=admit would=refuse: attempt cap"), &r))
	assert.Equal(t, "refuse: attempt cap", r.Would)
	assert.Equal(t, `wait_s=1.000 elapsed_s=2.000 tokens=3 decision=admit would="refuse: attempt cap"`, FormatRow(&r))
	r.Would = "sometimes"
	assert.ErrorContains(t, Check(&r), "would")
}

func TestReaderLineNumbersCommentsUnknownKeys(t *testing.T) {
	in := "# retrygate rehearsal log v1\n\nwait_s=1 elapsed_s=2 tokens=3 future_key=\"x y\"\n  # indented comment\nwait_s=4 elapsed_s=5 tokens=6\n"
	rows, rd, err := ReadAll(strings.NewReader(in), "r.log")
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, 3, rows[0].Line)
	assert.Equal(t, []KV{{"future_key", "x y"}}, rows[0].Extra)
	assert.Equal(t, 5, rows[1].Line)
	assert.Empty(t, rd.Torn())
}

func TestReaderErrorsNameLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"wait_s=abc elapsed_s=1 tokens=1\n", `r.log: line 1: wait_s: not a number "abc"`},
		{"# c\nwait_s=1 elapsed_s=1\n", `r.log: line 2: missing required key tokens`},
		{"wait_s=1 elapsed_s=1 tokens=-4\n", `r.log: line 1: tokens: negative count "-4"`},
		{"wait_s=1 elapsed_s=1 tokens=1 outcome=fine\n", `r.log: line 1: outcome: unknown outcome "fine"`},
		{"wait_s=1 elapsed_s=1 tokens=1 note=\"open\n", `r.log: line 1: note: unterminated quoted value`},
		{"garbage here\n", `r.log: line 1: expected key=value, got "garbage"`},
		{"wait_s=1 elapsed_s=1 tokens=1 wait_s=2\n", `r.log: line 1: wait_s: key appears twice`},
		{"job=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\njob=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\n", `r.log: line 2: duplicate attempt: job "a" attempt 1 appears twice (the job's rows start on line 1)`},
		{"wait_s=1 elapsed_s=1 tokens=9007199254740992\n", `r.log: line 1: tokens: count over 9007199254740991`},
		{"wait_s=1 elapsed_s=1 tokens=1 spent_tokens=5000000000000000000\n", `r.log: line 1: spent_tokens: count over`},
		{"wait_s=1000000000.001 elapsed_s=1 tokens=1\n", `r.log: line 1: wait_s: more than 1000000000 seconds`},
		{"wait_s=1 elapsed_s=1 tokens=1 retry_after_s=9223372036.854\n", `r.log: line 1: retry_after_s: more than`},
		{"wait_s=1 elapsed_s=1 tokens=1 cost_usd=1e13\n", `r.log: line 1: cost_usd: amount over 1000000000000`},
		{"wait_s=1 elapsed_s=1 tokens=1 used=1048577\n", `r.log: line 1: used: not a count of attempts`},
		{"job=a attempt=1048577 wait_s=1 elapsed_s=1 tokens=1\n", `r.log: line 1: attempt: not an attempt number`},
		{"# c\nwait_s=1 elapsed_s=1\x00 tokens=1\n", `r.log: line 2: control character 0x00 at column 21`},
		{"wait_s=1 elapsed_s=1 tokens=1\n\uFEFFts=2026-01-01T00:00:00Z wait_s=1 elapsed_s=1 tokens=1\n", `r.log: line 2: byte order mark in key`},
		{"ts=0001-01-01T00:00:00Z wait_s=1 elapsed_s=1 tokens=1\n", `r.log: line 1: ts: time 0001-01-01T00:00:00Z is outside`},
		{"wait_s=1 elapsed_s=1 tokens=1 tokens_from=mixed\n", `r.log: line 1: tokens_from=mixed goes with`},
		{"wait_s=1 elapsed_s=1 tokens=1 tokens_from=usage prompt_tokens_from=usage completion_tokens_from=hand\n", `r.log: line 1: tokens_from=mixed goes with`},
		{"wait_s=NaN elapsed_s=1 tokens=1\n", `r.log: line 1: wait_s: not a number "NaN"`},
		{"wait_s=1 elapsed_s=1 tokens=1 decision=maybe\n", `r.log: line 1: decision: not a decision "maybe"`},
		{"wait_s=1 elapsed_s=1 tokens=1 would=retries\n", `r.log: line 1: would: not what a policy would do "retries"`},
	}
	for _, tt := range tests {
		_, _, err := ReadAll(strings.NewReader(tt.in), "r.log")
		require.Error(t, err, tt.in)
		assert.True(t, strings.HasPrefix(err.Error(), tt.want), "got %q want prefix %q", err, tt.want)
	}
}

func TestSkipBad(t *testing.T) {
	r := NewReader(strings.NewReader("wait_s=x elapsed_s=1 tokens=1\nwait_s=1 elapsed_s=1 tokens=1\n"), "r.log")
	r.SkipBad(true)
	var row Row
	require.NoError(t, r.Next(&row))
	assert.Equal(t, 2, row.Line)
	assert.Equal(t, io.EOF, r.Next(&row))
	require.Len(t, r.Skipped(), 1)
	assert.Equal(t, 1, r.Skipped()[0].Line)
}

func TestTornTailIsReportedAndNeverGlued(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rehearsal.log")
	w := NewWriter(path, false)
	require.NoError(t, w.Append(Row{Job: "a", Attempt: 1, Wait: time.Second, Elapsed: 2 * time.Second, Tokens: 10}))
	require.NoError(t, w.Close())
	// A crashed writer's half row: valid-looking, but cut mid-number.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("job=a attempt=2 wait_s=1.000 elapsed_s=2.000 tokens=21")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	rows, rd, err := ReadFile(path)
	require.NoError(t, err)
	assert.Len(t, rows, 1)
	require.Len(t, rd.Torn(), 1)
	assert.Equal(t, 3, rd.Torn()[0].Line)

	// The next append starts on a fresh line and marks the torn one.
	w = NewWriter(path, false)
	require.NoError(t, w.Append(Row{Job: "a", Attempt: 2, Wait: time.Second, Elapsed: 2 * time.Second, Tokens: 2100}))
	require.NoError(t, w.Close())
	rows, rd, err = ReadFile(path)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, int64(2100), rows[1].Tokens, "the torn 21 never became a row")
	require.Len(t, rd.Torn(), 1)
	assert.Equal(t, 3, rd.Torn()[0].Line)
	data, _ := os.ReadFile(path)
	assert.Contains(t, string(data), "tokens=21\n"+TornMarker+"\n")
}

func TestWriterHeaderOnlyOnCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.log")
	for i := 1; i <= 3; i++ {
		w := NewWriter(path, true)
		require.NoError(t, w.Append(Row{Job: "j", Attempt: i, Tokens: 1}))
		require.NoError(t, w.Close())
	}
	data, _ := os.ReadFile(path)
	assert.Equal(t, 1, strings.Count(string(data), Header))
	assert.True(t, strings.HasPrefix(string(data), Header+"\n"))
}

func TestWriterCreatesNothingWithoutARow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "never.log")
	w := NewWriter(path, false)
	require.NoError(t, w.Close())
	_, err := os.Stat(path)
	assert.True(t, os.IsNotExist(err))
}

func TestWriterDirectoryAndReadOnly(t *testing.T) {
	dir := t.TempDir()
	err := NewWriter(dir, false).Append(Row{Tokens: 1})
	assert.ErrorContains(t, err, "is a directory")
	if os.Geteuid() == 0 {
		t.Log("running as root: read-only permissions are not enforced; the CLI suite covers read-only logs with chattr-free checks")
		return
	}
	path := filepath.Join(dir, "ro.log")
	require.NoError(t, os.WriteFile(path, []byte(Header+"\n"), 0o444))
	err = NewWriter(path, false).Append(Row{Tokens: 1})
	assert.ErrorContains(t, err, "permission denied")
}

func TestConcurrentWritersLockedNumbering(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Separate writers, as separate processes would have.
			w := NewWriter(path, false)
			defer w.Close()
			for k := 0; k < each; k++ {
				err := w.Locked(func() ([]Row, error) {
					rows, err := ReadJob(path, "shared")
					if err != nil {
						return nil, err
					}
					return []Row{{Job: "shared", Attempt: len(rows) + 1, Tokens: 1}}, nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rows, _, err := ReadFile(path) // strict: a duplicate attempt would fail here
	require.NoError(t, err)
	require.Len(t, rows, writers*each)
	for i, r := range rows {
		assert.Equal(t, i+1, r.Attempt)
	}
}

// estimate is the conservative estimate of a job's next attempt on the
// seat of its last sent attempt, from its rows (JobGate.Estimate).
func estimate(rows []Row) admit.Next {
	var g JobGate
	g.Books(Rules{}, rows)
	_, n := g.Estimate("")
	return n
}

func TestJobSpendAndEstimate(t *testing.T) {
	rows := []Row{
		{Job: "j", Attempt: 1, Seat: "a", Wait: 1200 * time.Millisecond, Elapsed: 7200 * time.Millisecond, Tokens: 2100, Outcome: admit.Reset},
		{Job: "j", Attempt: 2, Seat: "a", Wait: 5 * time.Second, Elapsed: 5 * time.Second, Tokens: 0, Outcome: admit.WaitCap, Delay: 300 * time.Millisecond},
		{Job: "j", Attempt: 3, Seat: "a", Wait: 9 * time.Second, Elapsed: 9 * time.Second, Tokens: 9, Unsent: true, Decision: "refuse: attempt cap"},
	}
	s := JobSpend(rows)
	assert.Equal(t, admit.Spent{Time: 7200*time.Millisecond + 5300*time.Millisecond, Tokens: 2100, Attempts: 2}, s)
	n := estimate(rows)
	assert.Equal(t, 5*time.Second, n.Wait, "last observed wait")
	assert.Equal(t, 6*time.Second, n.Gen, "the wait-capped attempt was cut off; the reset one returned bytes: 7.2 s − its 1.2 s wait")
	assert.Equal(t, 11*time.Second, n.Elapsed(), "elapsed holds its wait once: 5 s + 6 s")
	assert.Equal(t, int64(2100), n.Tokens)
}

// rowGen draws rows that the writer may produce.
func rowGen() *rapid.Generator[Row] {
	word := rapid.StringMatching(`[a-z0-9_.:-]{1,12}`)
	text := rapid.String()
	secs := rapid.Custom(func(t *rapid.T) time.Duration {
		return time.Duration(rapid.Int64Range(0, 3_600_000).Draw(t, "ms")) * time.Millisecond
	})
	return rapid.Custom(func(t *rapid.T) Row {
		r := Row{
			Job:     word.Draw(t, "job"),
			Attempt: rapid.IntRange(1, 1000).Draw(t, "attempt"),
			Seat:    word.Draw(t, "seat"),
			Wait:    secs.Draw(t, "wait"),
			Elapsed: secs.Draw(t, "elapsed"),
			Tokens:  rapid.Int64Range(0, 1<<40).Draw(t, "tokens"),
			Outcome: rapid.SampledFrom(admit.Outcomes).Draw(t, "outcome"),
			Billing: rapid.SampledFrom([]admit.Billing{admit.Billable, admit.Free, admit.Ambiguous}).Draw(t, "billing"),
			Unsent:  rapid.Bool().Draw(t, "unsent"),
			Holdout: rapid.Bool().Draw(t, "holdout"),
			Note:    text.Draw(t, "note"),
		}
		if rapid.Bool().Draw(t, "hasTS") {
			r.TS = time.Unix(rapid.Int64Range(0, 4e9).Draw(t, "ts"), rapid.Int64Range(0, 1e9-1).Draw(t, "ns")).UTC()
		}
		if rapid.Bool().Draw(t, "split") {
			r.PromptTokens = rapid.Int64Range(0, 1<<30).Draw(t, "p")
			r.CompletionTokens = rapid.Int64Range(0, 1<<30).Draw(t, "c")
			r.HasSplit = true
		}
		if rapid.Bool().Draw(t, "decided") {
			r.Decision = rapid.SampledFrom([]string{"admit", "refuse: queue wait", "refuse: deadline", "refuse: breaker open"}).Draw(t, "decision")
		}
		if rapid.Bool().Draw(t, "shadow") {
			r.Would = rapid.SampledFrom([]string{"admit", "refuse: attempt cap", "retry", "fallback"}).Draw(t, "would")
		}
		if rapid.Bool().Draw(t, "spent") {
			r.SpentS, r.SpentTokens, r.Used, r.HasSpent = secs.Draw(t, "spent_s"), rapid.Int64Range(0, 1e9).Draw(t, "st"), rapid.IntRange(0, 100).Draw(t, "used"), true
		}
		if rapid.Bool().Draw(t, "itl") {
			r.ITLMean, r.ITLMax, r.HasITL = secs.Draw(t, "itl_mean"), secs.Draw(t, "itl_max"), true
		}
		if rapid.Bool().Draw(t, "cost") {
			r.CostUSD, r.HasCost = float64(rapid.IntRange(0, 1e7).Draw(t, "micro"))/1e6, true
		}
		if rapid.Bool().Draw(t, "uncached") {
			r.UncachedUSD = float64(rapid.IntRange(1, 1e7).Draw(t, "uncached_micro")) / 1e6
		}
		// Each token part and rate-limit part on its own: a reported 0
		// reads back as reported.
		count := rapid.Int64Range(0, 1<<30)
		if r.HasCached = rapid.Bool().Draw(t, "cached?"); r.HasCached {
			r.CachedTokens = count.Draw(t, "cached")
		}
		if r.HasCacheWrite = rapid.Bool().Draw(t, "write?"); r.HasCacheWrite {
			r.CacheWriteTokens = count.Draw(t, "write")
		}
		if r.HasReasoning = rapid.Bool().Draw(t, "reasoning?"); r.HasReasoning {
			r.ReasoningTokens = count.Draw(t, "reasoning")
		}
		rl := &r.RateLimit
		if rl.HasRequests = rapid.Bool().Draw(t, "rl_requests?"); rl.HasRequests {
			rl.RemainingRequests = count.Draw(t, "rl_requests")
		}
		if rl.HasTokens = rapid.Bool().Draw(t, "rl_tokens?"); rl.HasTokens {
			rl.RemainingTokens = count.Draw(t, "rl_tokens")
		}
		if rl.HasReset = rapid.Bool().Draw(t, "rl_reset?"); rl.HasReset {
			rl.Reset = secs.Draw(t, "rl_reset")
		}
		return r
	})
}

func TestRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		want := rowGen().Draw(t, "row")
		line := AppendRow(nil, &want)
		if strings.Count(string(line), "\n") != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("not exactly one line: %q", line)
		}
		var got Row
		if err := ParseLine(line[:len(line)-1], &got); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		want.Note = strings.ToValidUTF8(want.Note, "\uFFFD")
		if got.Note != want.Note {
			// go-logfmt writes invalid UTF-8 bytes as U+FFFD one rune at a time.
			assert.Equal(t, []rune(strings.ToValidUTF8(want.Note, "\uFFFD")), []rune(got.Note))
			got.Note = want.Note
		}
		if !assert.ObjectsAreEqual(want, got) {
			t.Fatalf("round trip\nwant %+v\ngot  %+v\nline %q", want, got, line)
		}
	})
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("wait_s=18.0 elapsed_s=9.0 tokens=2400 decision=refuse: queue wait\n"))
	f.Add([]byte(Header + "\nts=2026-11-30T10:00:00Z job=a attempt=1 wait_s=1.200 elapsed_s=7.200 tokens=2100 note=\"a \\\"b\\\"\"\n"))
	f.Add([]byte("job=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\n" + TornMarker + "\njob=a"))
	f.Add([]byte("wait_s=1 elapsed_s=1 tokens=1 x=\"\\u00e9\"\n\n#\n"))
	// The boundaries of issue 12: a BOM, a NUL, counts past the limits, mixed
	// token sources, a marker under a blank line, another job's torn line.
	f.Add([]byte("\uFEFFts=2026-01-01T00:00:00Z wait_s=1 elapsed_s=1 tokens=1\nwait_s=1\x00 elapsed_s=1 tokens=1\n"))
	f.Add([]byte("wait_s=1000000000 elapsed_s=1 tokens=9007199254740991 spent_tokens=9007199254740992 cost_usd=1e12 retry_after_s=9223372036.854\n"))
	f.Add([]byte("wait_s=1 elapsed_s=1 tokens=3 tokens_from=mixed prompt_tokens_from=usage completion_tokens_from=tokenizer\n"))
	f.Add([]byte("job=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\n\n" + TornMarker + "\njob=b attempt=2 wait_s=1 elap\n" + TornMarker + "\njob=a attempt=65634 wait_s=1 elapsed_s=1 tokens=1\n"))
	f.Add([]byte("# event breaker seat=a from=closed to=open ts=2026-01-01T00:00:00Z\n# event breaker seat=\"a b\" from=open to=half-open x=1 ts=2026-01-01T00:00:10.5Z\n# event drain ts=2026-01-01T00:00:00Z\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(strings.NewReader(string(data)), "f.log")
		r.SkipBad(true)
		// Whatever event reads must write back and read again the same.
		r.OnEvent(func(e *Event) {
			line, err := FormatEvent(e)
			if err != nil {
				t.Fatalf("event %+v read, but not written: %v", e, err)
			}
			again, err := ParseEvent([]byte(line))
			if err != nil {
				t.Fatalf("re-read of %q: %v", line, err)
			}
			if again.Kind != e.Kind || !again.TS.Equal(e.TS) || again.From != e.From || again.To != e.To {
				t.Fatalf("event %+v came back as %+v", e, again)
			}
		})
		for i := 0; i < 100000; i++ {
			var row Row
			err := r.Next(&row)
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
			// Whatever reads must write back and read again to the same row.
			line := AppendRow(nil, &row)
			var again Row
			if err := ParseLine(line[:len(line)-1], &again); err != nil {
				t.Fatalf("re-read of %q: %v", line, err)
			}
		}
	})
}

// BenchmarkRead1M reads a 1,000,000-row log written by the writer.
func BenchmarkRead1M(b *testing.B) {
	path := filepath.Join(b.TempDir(), "1m.log")
	f, err := os.Create(path)
	require.NoError(b, err)
	bw := bufio.NewWriter(f)
	bw.WriteString(Header + "\n")
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var buf []byte
	for i := 0; i < 1_000_000; i++ {
		r := Row{TS: t0.Add(time.Duration(i) * time.Second), Job: fmt.Sprintf("r1-%07d", i/2), Attempt: i%2 + 1, Seat: "scratch", Model: "gpt-4o-mini",
			Wait: time.Duration(i%5000) * time.Millisecond, Elapsed: time.Duration(i%20000) * time.Millisecond, TTFB: 300 * time.Millisecond, HasTTFB: true,
			Tokens: 2100, PromptTokens: 1500, CompletionTokens: 600, HasSplit: true, TokensFrom: "usage", Outcome: admit.OK, HTTPStatus: 200, Billing: admit.Billable,
			SpentS: time.Second, SpentTokens: 2100, Used: i % 2, HasSpent: true, Decision: "admit"}
		buf = AppendRow(buf[:0], &r)
		bw.Write(buf)
	}
	require.NoError(b, bw.Flush())
	require.NoError(b, f.Close())
	st, _ := os.Stat(path)
	b.SetBytes(st.Size())
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f, _ := os.Open(path)
		r := NewReader(f, path)
		n := 0
		var row Row
		for {
			err := r.Next(&row)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		f.Close()
		if n != 1_000_000 {
			b.Fatalf("read %d rows", n)
		}
	}
}

// The log's numbers are admit's: plain decimals as a person writes them,
// never hex floats, underscores, inf or nan (admit.ParseNumber refuses
// them, and so does the reader, in every number key).
func TestReaderNumbersAreAdmitsGrammar(t *testing.T) {
	for _, v := range []string{"0x1p1", "1_0", "0x10", "Inf", "+Inf", "infinity", "nan", "1e", "1.2.3", "", ".", "0b1", "1__0", "１"} {
		for _, key := range []string{"wait_s", "elapsed_s", "ttfb_s", "delay_s", "cost_usd", "spent_usd"} {
			line := "wait_s=1 elapsed_s=1 tokens=1"
			line = strings.Replace(line, key+"=1", "", 1) + " " + key + "=" + v
			var r Row
			err := ParseLine([]byte(line), &r)
			require.Error(t, err, "%s", line)
			_, aerr := admit.ParseNumber(v)
			assert.Error(t, aerr, "admit's grammar refuses %q too", v)
		}
	}
	for _, v := range []string{"2", "2.", "2.000", "2e0", "2E+0", "0.2e1", "+2", "0002.0", "20e-1"} {
		var r Row
		require.NoError(t, ParseLine([]byte("wait_s="+v+" elapsed_s=2 tokens=1 cost_usd="+v), &r), v)
		assert.Equal(t, 2*time.Second, r.Wait, v)
		assert.Equal(t, 2.0, r.CostUSD, v)
	}
}

// The reader keeps what a row says to the microsecond, rounding half up
// past it, by the decimal digits (no float in between): a hand-written
// row with more decimals than the writer writes is read exactly.
func TestReaderKeepsMicroseconds(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0.0004":            400 * time.Microsecond,
		"0.0015":            1500 * time.Microsecond,
		"1.2345675":         1_234_568 * time.Microsecond,
		"1.2345665":         1_234_567 * time.Microsecond,
		"1.2345674999":      1_234_567 * time.Microsecond,
		"0.0000005":         time.Microsecond,
		"0.0000004":         0,
		"1e-6":              time.Microsecond,
		"2.5e3":             2500 * time.Second,
		"999999999.9999994": 999_999_999_999_999 * time.Microsecond,
		"1000000000":        admit.MaxDuration,
	} {
		var r Row
		require.NoError(t, ParseLine([]byte("wait_s="+in+" elapsed_s=1 tokens=1"), &r), in)
		assert.Equal(t, want, r.Wait, in)
	}
}
