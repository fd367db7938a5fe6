package ledgerfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// item is a row or an event, in the order a reader handed them out.
type item struct {
	line  int
	event string // "kind seat from>to", or "" for a row
	job   string
}

func readItems(t *testing.T, r io.Reader, workers int) []item {
	t.Helper()
	rd := NewReader(r, "e.log")
	rd.Workers(workers)
	defer rd.Close()
	var out []item
	rd.OnEvent(func(e *Event) {
		out = append(out, item{line: e.Line, event: fmt.Sprintf("%s %s %s>%s %s", e.Kind, e.Seat, e.From, e.To, e.TS.Format(time.RFC3339Nano))})
	})
	for {
		var row Row
		err := rd.Next(&row)
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		out = append(out, item{line: row.Line, job: row.Job})
	}
}

// A breaker's changes of state are `# event` lines the writer appends
// among the rows; the reader hands them out in file order, and a reader
// that does not ask for them reads the same rows as before.
func TestEventsWrittenAndReadInOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.log")
	w := NewWriter(path, false)
	w.Batch(1<<20, time.Hour) // an event lands after the rows held before it
	ts := time.Date(2026, 11, 30, 10, 0, 7, 200e6, time.UTC)
	require.NoError(t, w.Append(Row{Job: "j1", Attempt: 1, Wait: time.Second, Elapsed: 2 * time.Second, Tokens: 1}))
	require.NoError(t, w.Event(&Event{Kind: EventBreaker, Seat: "a b", From: "closed", To: "open", TS: ts}))
	require.NoError(t, w.Append(Row{Job: "j2", Attempt: 1, Wait: time.Second, Elapsed: 2 * time.Second, Tokens: 1}))
	require.NoError(t, w.Event(&Event{Kind: EventBreaker, Seat: "a b", From: "open", To: "half-open", TS: ts.Add(10 * time.Second)}))
	require.NoError(t, w.Close())

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	assert.Equal(t, `# event breaker seat="a b" from=closed to=open ts=2026-11-30T10:00:07.2Z`, lines[2])

	want := []item{
		{line: 2, job: "j1"},
		{line: 3, event: "breaker a b closed>open 2026-11-30T10:00:07.2Z"},
		{line: 4, job: "j2"},
		{line: 5, event: "breaker a b open>half-open 2026-11-30T10:00:17.2Z"},
	}
	assert.Equal(t, want, readItems(t, strings.NewReader(string(data)), 1))
	assert.Equal(t, want, readItems(t, strings.NewReader(string(data)), 4), "a parallel read hands out the same")

	rows, _, err := ReadAll(strings.NewReader(string(data)), "e.log")
	require.NoError(t, err)
	assert.Len(t, rows, 2, "without OnEvent an event is a comment")
}

// The writer refuses an event a reader would not read back, and writes nothing.
func TestWriterRefusesBadEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.log")
	w := NewWriter(path, false)
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, e := range []Event{
		{Kind: EventBreaker, Seat: "s", From: "closed", To: "ajar", TS: ts},
		{Kind: EventBreaker, From: "closed", To: "open", TS: ts},
		{Kind: EventBreaker, Seat: "s", From: "closed", To: "open"},
		{Kind: "two words", TS: ts},
	} {
		assert.ErrorContains(t, w.Event(&e), "refusing to write an event")
	}
	require.NoError(t, w.Close())
	_, err := os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// An event line cut short, or hand-written wrong, is a plain comment: no
// event, no error; an unknown kind is handed out for its reader to skip.
func TestEventLinesThatAreNotWholeEvents(t *testing.T) {
	data := strings.Join([]string{
		"# event breaker seat=s from=closed to=op",
		"# event breaker seat=s from=closed to=open ts=2026-01-01T00:0",
		"# event breaker seat=s from=closed to=shut ts=2026-01-01T00:00:00Z",
		`# event breaker seat="s from=closed to=open ts=2026-01-01T00:00:00Z`,
		"# event drain seat=s ts=2026-01-01T00:00:00Z",
		"job=j wait_s=1 elapsed_s=1 tokens=1",
		"# event breaker seat=s from=half-open to=closed ts=2026-01-01T00:00:01Z",
		"",
	}, "\n")
	assert.Equal(t, []item{
		{line: 5, event: "drain s > 2026-01-01T00:00:00Z"},
		{line: 6, job: "j"},
		{line: 7, event: "breaker s half-open>closed 2026-01-01T00:00:01Z"},
	}, readItems(t, strings.NewReader(data), 1))
}

func TestEventRoundTrip(t *testing.T) {
	e := Event{Kind: EventBreaker, Seat: "q\"x\n", From: "half-open", To: "open", TS: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		Extra: []KV{{"probe", "2"}}}
	line, err := FormatEvent(&e)
	require.NoError(t, err)
	assert.NotContains(t, line, "\n")
	got, err := ParseEvent([]byte(line))
	require.NoError(t, err)
	assert.Equal(t, e, got)
}
