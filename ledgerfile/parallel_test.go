package ledgerfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// readOutcome is everything a read gives back: the rows, the error that
// stopped it, and the torn and skipped lines.
type readOutcome struct {
	Rows    []Row
	Err     string
	Torn    []string
	Skipped []string
	Order   []string // rows, events and comments as handed on, in order
}

func readWith(data []byte, skipBad bool, workers, chunk int) readOutcome {
	return readFrom(bytes.NewReader(data), skipBad, workers, chunk)
}

// readFrom reads in, with workers parsing, chunk lines to a batch (0:
// the reader's own size).
func readFrom(in io.Reader, skipBad bool, workers, chunk int) readOutcome {
	r := NewReader(in, "f.log")
	r.SkipBad(skipBad)
	r.Workers(workers)
	if chunk > 0 {
		r.lines = chunk
	}
	defer r.Close()
	var out readOutcome
	r.OnEvent(func(e *Event) { out.Order = append(out.Order, fmt.Sprintf("event %d %s", e.Line, e.Kind)) })
	r.OnComment(func(line int, text string) { out.Order = append(out.Order, fmt.Sprintf("comment %d %q", line, text)) })
	for range 100000 {
		var row Row
		err := r.Next(&row)
		if err == io.EOF {
			break
		}
		if err != nil {
			out.Err = err.Error()
			break
		}
		out.Rows = append(out.Rows, row)
		out.Order = append(out.Order, fmt.Sprintf("row %d", row.Line))
	}
	for _, e := range r.Torn() {
		out.Torn = append(out.Torn, e.Error())
	}
	for _, e := range r.Skipped() {
		out.Skipped = append(out.Skipped, e.Error())
	}
	return out
}

// A parallel read gives back what a plain read does: the same rows in
// the same order, the same error, the same torn and skipped lines,
// however the lines fall into batches.
func FuzzParallelReadMatchesPlainRead(f *testing.F) {
	f.Add([]byte("wait_s=18.0 elapsed_s=9.0 tokens=2400 decision=refuse: queue wait\n"), uint8(1))
	f.Add([]byte(Header+"\nts=2026-11-30T10:00:00Z job=a attempt=1 wait_s=1.200 elapsed_s=7.200 tokens=2100 note=\"a \\\"b\\\"\"\n"), uint8(2))
	f.Add([]byte("job=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\n"+TornMarker+"\njob=a"), uint8(1))
	f.Add([]byte("job=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\n\n"+TornMarker+"\njob=b attempt=2 wait_s=1 elap\n"+TornMarker+"\njob=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\n"), uint8(3))
	f.Add([]byte("job=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\njob=a attempt=2 wait_s=1 elapsed_s=1 tokens=x\njob=a attempt=2 wait_s=1 elapsed_s=1 tokens=1\njob=a attempt=1 wait_s=1 elapsed_s=1 tokens=1 job_end=failed\n"), uint8(1))
	f.Add([]byte("\uFEFFwait_s=1 elapsed_s=1 tokens=1\nwait_s=1\x00 elapsed_s=1 tokens=1\n#\n\nwait_s=1 elapsed_s=1 tokens=1"), uint8(2))
	f.Add([]byte(Header+"\n# run r1\njob=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\n# policy run=r1 hash=abc\n# event breaker seat=s from=closed to=open ts=2026-11-30T10:00:07.2Z\n# event x\njob=b attempt=1 wait_s=1 elapsed_s=1 tokens=1\n  # indented\n"+TornMarker+"\n"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, batch uint8) {
		// Batches of 1 to 64 lines, cut anywhere.
		chunk := int(batch%64) + 1
		for _, skipBad := range []bool{false, true} {
			want := readWith(data, skipBad, 1, 0)
			got := readWith(data, skipBad, 2, chunk)
			require.Equal(t, want, got, "skipBad %v", skipBad)
		}
		// An input that fails after its bytes: the same rows, then the
		// same failure.
		fail := func(workers int) readOutcome {
			return readFrom(&errAfter{data: data, err: errors.New("disk on fire")}, true, workers, chunk)
		}
		require.Equal(t, fail(1), fail(2), "a failing input")
	})
}

// The same over a log of many batches, with bad, duplicate, torn and
// over-long lines among its rows, read with the batches' own sizes.
func TestParallelReadOfALongLog(t *testing.T) {
	var b strings.Builder
	b.WriteString(Header + "\n")
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var buf []byte
	bad, torn := 0, 0
	for i := range 20000 {
		r := Row{TS: t0.Add(time.Duration(i) * time.Second), Job: fmt.Sprintf("j%d", i/3), Attempt: i%3 + 1, Seat: "s", Model: "m",
			Wait: time.Duration(i%700) * time.Millisecond, Elapsed: time.Second, Tokens: int64(i), Outcome: admit.OK, Decision: "admit"}
		if i%3 == 2 {
			r.JobEnd = JobSucceeded
		}
		buf = AppendRow(buf[:0], &r)
		b.Write(buf)
		switch i % 997 {
		case 5:
			b.WriteString("wait_s=x elapsed_s=1 tokens=1\n")
			bad++
		case 6, 7:
			if r.JobEnd == "" {
				b.Write(buf) // a duplicate attempt
				bad++
			}
		case 8:
			b.WriteString("job=q attempt=1 wait_s=1 elap\n" + TornMarker + "\n")
			torn++
		case 9:
			b.WriteString(strings.Repeat("a", MaxLine+10) + "\n")
			bad++
		}
	}
	data := []byte(b.String())
	for _, skipBad := range []bool{false, true} {
		want := readWith(data, skipBad, 1, 0)
		got := readWith(data, skipBad, 2, 0)
		require.Equal(t, len(want.Rows), len(got.Rows))
		require.True(t, reflect.DeepEqual(want, got), "skipBad %v: the parallel read differs", skipBad)
		if skipBad {
			require.Len(t, got.Rows, 20000)
			require.Len(t, got.Skipped, bad)
			require.Len(t, got.Torn, torn)
		} else {
			require.Contains(t, got.Err, "f.log: line 8: wait_s: not a number")
		}
	}
}

// A parallel read that stops early, on a bad line or by Close, leaves no
// goroutine behind.
func TestParallelReadStopsItsGoroutines(t *testing.T) {
	var b strings.Builder
	for i := range 50000 {
		fmt.Fprintf(&b, "job=j%d attempt=1 wait_s=1 elapsed_s=1 tokens=1 job_end=succeeded\n", i)
		if i == 100 {
			b.WriteString("wait_s=x elapsed_s=1 tokens=1\n")
		}
	}
	data := []byte(b.String())
	before := runtime.NumGoroutine()
	settled := func() bool { // the goroutines end soon after, not at once
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if runtime.NumGoroutine() <= before {
				return true
			}
		}
		return false
	}
	r := NewReader(bytes.NewReader(data), "f.log")
	r.Workers(2)
	var row Row
	var err error
	for err == nil {
		err = r.Next(&row)
	}
	require.ErrorContains(t, err, "line 102: wait_s")
	require.NoError(t, r.Next(&row), "after a bad line, the read goes on as a plain one does")
	require.Equal(t, 103, row.Line)
	r.Close()
	require.Equal(t, io.EOF, r.Next(&row), "a closed read is over")
	require.True(t, settled(), "the reader's goroutines stopped at Close")

	r = NewReader(bytes.NewReader(data), "f.log")
	r.Workers(2)
	r.SkipBad(true)
	n := 0
	for r.Next(&row) == nil {
		n++
	}
	require.Equal(t, 50000, n)
	require.True(t, settled(), "the reader's goroutines stopped at the end")
}

// errAfter is an input that fails after its data.
type errAfter struct {
	data []byte
	err  error
}

func (e *errAfter) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

// Lines up to MaxLine and past it, in batches of a few lines and many,
// read as a plain read does: the same rows, bad
// lines, torn tails and read failures.
func TestParallelReadOfLongLines(t *testing.T) {
	row := "job=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\n"
	fit := "wait_s=1 elapsed_s=1 tokens=1 note=" + strings.Repeat("n", MaxLine-len("wait_s=1 elapsed_s=1 tokens=1 note="))
	over := strings.Repeat("o", MaxLine+1)
	cases := map[string]string{
		"a line of MaxLine bytes":          row + fit + "\n" + row,
		"a line of MaxLine bytes, torn":    row + fit,
		"a line past MaxLine":              row + over + "\n" + row,
		"a line past MaxLine, last":        row + over + "\n",
		"a torn tail past MaxLine":         row + over,
		"a blank torn tail past MaxLine":   row + strings.Repeat(" ", MaxLine+5),
		"long lines in a row":              fit + "\n" + over + "\n" + fit + "\n" + over + over + "\n" + row + row,
		"a byte order mark on a long line": "\uFEFF" + fit[:MaxLine-3] + "\n" + "\uFEFF" + row,
	}
	for name, data := range cases {
		for _, chunk := range []int{0, 1000, 4096, MaxLine - 1, MaxLine + 7} {
			for _, skipBad := range []bool{false, true} {
				want := readWith([]byte(data), skipBad, 1, 0)
				got := readWith([]byte(data), skipBad, 2, chunk)
				require.True(t, reflect.DeepEqual(want, got), "%s, chunk %d, skipBad %v:\nplain    %+v\nparallel %+v", name, chunk, skipBad, summarize(want), summarize(got))
			}
		}
	}
	// A read that fails: the whole lines before it, then the failure.
	for _, data := range []string{row + row + "job=b att", row + over, row + fit[:5000]} {
		for _, chunk := range []int{0, 7, 4096} {
			read := func(workers int) readOutcome {
				return readFrom(&errAfter{data: []byte(data), err: errors.New("disk on fire")}, false, workers, chunk)
			}
			want, got := read(1), read(2)
			require.Contains(t, want.Err, "disk on fire")
			require.Equal(t, want, got, "chunk %d", chunk)
		}
	}
}

// summarize is a read's outcome without its rows' bytes, for a message.
func summarize(o readOutcome) string {
	return fmt.Sprintf("%d rows, err %q, torn %v, skipped %v", len(o.Rows), o.Err, o.Torn, o.Skipped)
}

// Job ids are copied out of the lines they were read from: every row kept
// keeps its own id, across many batches, in a plain and a parallel read.
func TestJobIDsOutliveTheirBlocks(t *testing.T) {
	var b strings.Builder
	for i := range 30000 {
		fmt.Fprintf(&b, "job=job-%d-%s attempt=1 wait_s=1 elapsed_s=1 tokens=1 job_end=succeeded\n", i, strings.Repeat("x", i%40))
	}
	for _, workers := range []int{1, 2} {
		got := readWith([]byte(b.String()), false, workers, 0)
		require.Empty(t, got.Err)
		require.Len(t, got.Rows, 30000)
		for i, r := range got.Rows {
			if want := fmt.Sprintf("job-%d-%s", i, strings.Repeat("x", i%40)); r.Job != want {
				t.Fatalf("workers %d: row %d: job %q, want %q", workers, i, r.Job, want)
			}
		}
	}
}

// OnComment hands on the comment lines the rows stand among, in file
// order, trimmed; not a torn marker, a blank line, an event OnEvent
// takes, nor an unterminated tail.
func TestReaderHandsOnComments(t *testing.T) {
	log := Header + "\n# run r1\njob=a attempt=1 wait_s=1 elapsed_s=1 tokens=1\n  # policy run=r1 hash=abc  \n\n" +
		"# event breaker seat=s from=closed to=open ts=2026-11-30T10:00:07.2Z\n# event not one\n" +
		"job=b attempt=1 wait_s=1 elapsed_s=1 tokens=1\n" + TornMarker + "\n# cut"
	for _, workers := range []int{1, 2} {
		got := readWith([]byte(log), false, workers, 1)
		require.Equal(t, []string{
			`comment 1 "` + Header + `"`,
			`comment 2 "# run r1"`,
			"row 3",
			`comment 4 "# policy run=r1 hash=abc"`,
			"event 6 breaker",
			`comment 7 "# event not one"`,
		}, got.Order, "workers %d", workers)
		require.Len(t, got.Torn, 2, "the row the marker names, and the cut tail")
	}
}
