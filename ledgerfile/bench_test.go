package ledgerfile

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// writeLog writes n rows the way many record runs would: jobs of two
// attempts each, in order, unless oneJob puts every row in job "solo".
func writeLog(tb testing.TB, path string, n int, oneJob bool) {
	f, err := os.Create(path)
	require.NoError(tb, err)
	bw := bufio.NewWriterSize(f, 1<<20)
	bw.WriteString(Header + "\n")
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var buf []byte
	for i := 0; i < n; i++ {
		job, attempt, used := fmt.Sprintf("r1-%07d", i/2), i%2+1, i%2
		if oneJob {
			job, attempt, used = "solo", i+1, i
		}
		r := Row{TS: t0.Add(time.Duration(i) * time.Second), Job: job, Attempt: attempt, Seat: "scratch", Model: "gpt-4o-mini",
			Wait: time.Duration(1+i%5000) * time.Millisecond, Elapsed: time.Duration(5000+i%20000) * time.Millisecond, TTFB: 300 * time.Millisecond, HasTTFB: true,
			Tokens: 2100, PromptTokens: 1500, CompletionTokens: 600, HasSplit: true, TokensFrom: FromUsage, Outcome: admit.OK, HTTPStatus: 200, Billing: admit.Billable,
			SpentS: time.Duration(used) * time.Second, SpentTokens: int64(used) * 2100, Used: min(used, admit.MaxAttempts), HasSpent: true, Decision: "admit"}
		if oneJob && i >= admit.MaxAttempts-1 {
			r.Attempt, r.Used = 0, admit.MaxAttempts // past the most attempts a log numbers
		}
		buf = AppendRow(buf[:0], &r)
		bw.Write(buf)
	}
	require.NoError(tb, bw.Flush())
	require.NoError(tb, f.Close())
}

// cachedLog builds a benchmark log once per run of the test binary.
func cachedLog(tb testing.TB, name string, n int, oneJob bool) string {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("retrygate-bench-%s-%d.log", name, n))
	if st, err := os.Stat(path); err == nil && st.Size() > int64(n)*100 {
		return path
	}
	writeLog(tb, path+".tmp", n, oneJob)
	require.NoError(tb, os.Rename(path+".tmp", path))
	return path
}

// BenchmarkWriterRow appends one row per operation through one Writer:
// the file is opened once, and each row is lock, fstat, write, unlock.
func BenchmarkWriterRow(b *testing.B) {
	path := filepath.Join(b.TempDir(), "w.log")
	w := NewWriter(path, false)
	defer w.Close()
	row := Row{TS: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), Job: "r1-0000001", Seat: "scratch", Model: "gpt-4o-mini",
		Wait: time.Second, Elapsed: 7 * time.Second, Tokens: 2100, TokensFrom: FromUsage, Outcome: admit.OK, Billing: admit.Billable, Decision: "admit"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		row.Attempt = i%admit.MaxAttempts + 1
		if err := w.Append(row); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordTail1M is one `record` on a 1,000,000-row log for the
// job whose rows are last (a shell retry loop's case). The log grows by
// one row per operation.
func BenchmarkRecordTail1M(b *testing.B) {
	src := cachedLog(b, "1m", 1_000_000, false)
	path := filepath.Join(b.TempDir(), "1m.log") // a private copy: the benchmark appends
	data, err := os.ReadFile(src)
	require.NoError(b, err)
	require.NoError(b, os.WriteFile(path, data, 0o644))
	data = nil
	budget := admit.Budget{Deadline: time.Hour, TokenCeiling: 1 << 40, MaxAttempts: admit.MaxAttempts, MaxWait: time.Hour}
	b.ResetTimer()
	for b.Loop() {
		w := NewWriter(path, false)
		if _, err := Record(w, Row{Job: "r1-0499999", Wait: time.Second, Elapsed: 2 * time.Second, Tokens: 10}, Rules{Budget: budget}); err != nil {
			b.Fatal(err)
		}
		w.Close()
	}
}

// BenchmarkJobTail1MFirstJob is `admit --log` for the job whose rows are
// the first of a 1,000,000-row log: the whole file is read backwards.
func BenchmarkJobTail1MFirstJob(b *testing.B) {
	path := cachedLog(b, "1m", 1_000_000, false)
	for b.Loop() {
		rows, err := JobTail(path, "r1-0000000", BookRows())
		if err != nil || len(rows) == 0 {
			b.Fatal(len(rows), err)
		}
	}
}

// BenchmarkJobTail1MLastJob is `admit --log` for the job whose rows are last.
func BenchmarkJobTail1MLastJob(b *testing.B) {
	path := cachedLog(b, "1m", 1_000_000, false)
	for b.Loop() {
		rows, err := JobTail(path, "r1-0499999", BookRows())
		if err != nil || len(rows) == 0 {
			b.Fatal(len(rows), err)
		}
	}
}

// BenchmarkJobTail10MOneJob is record's read on a log of 10,000,000 rows
// of one job: the job's last row carries its spend, so one block is read.
func BenchmarkJobTail10MOneJob(b *testing.B) {
	if testing.Short() {
		b.Skip("writes a 3 GB log")
	}
	path := cachedLog(b, "solo", 10_000_000, true)
	for b.Loop() {
		rows, err := JobTail(path, "solo", CarriesSpend)
		if err != nil || len(rows) == 0 {
			b.Fatal(len(rows), err)
		}
	}
}

// BenchmarkParseLine parses the rows of a log held in memory, one row
// per operation: the parser's own cost per row, without reading or any
// goroutine. The rows are the first 100,000 of $RETRYGATE_BENCH_LOG (a
// log `retrygate rehearse` wrote, as bench/compare.sh makes it) when
// set, else of a written log.
func BenchmarkParseLine(b *testing.B) {
	path := os.Getenv("RETRYGATE_BENCH_LOG")
	if path == "" {
		path = cachedLog(b, "1m", 1_000_000, false)
	}
	f, err := os.Open(path)
	require.NoError(b, err)
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() && len(lines) < 100_000 {
		if l := sc.Bytes(); len(l) > 0 && l[0] != '#' {
			lines = append(lines, bytes.Clone(l))
		}
	}
	ps := newParser()
	var row Row
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := ps.parse(lines[i%len(lines)], &row); err != nil {
			b.Fatal(err)
		}
	}
}
