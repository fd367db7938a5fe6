package ledgerfile

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"retrygate/admit"
)

// readOutcome is everything a read gives back: the rows, the error that
// stopped it, and the torn and skipped lines.
type readOutcome struct {
	Rows    []Row
	Err     string
	Torn    []string
	Skipped []string
}

func readWith(data []byte, skipBad bool, workers, batchLines int) readOutcome {
	r := NewReader(bytes.NewReader(data), "f.log")
	r.SkipBad(skipBad)
	r.Workers(workers)
	r.batchLines = batchLines
	defer r.Close()
	var out readOutcome
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
	f.Fuzz(func(t *testing.T, data []byte, batch uint8) {
		for _, skipBad := range []bool{false, true} {
			want := readWith(data, skipBad, 1, 0)
			got := readWith(data, skipBad, 2, int(batch%5)+1)
			require.Equal(t, want, got, "skipBad %v", skipBad)
		}
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
