package ledgerfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readBoth reads job's rows from data forward (Reader) and from the end
// (ReadJobTail); it returns each side's rows (Line zeroed) and the line
// each refused on (0 when it accepted).
func readBoth(t *testing.T, data, job string) (fwd, tail []Row, fwdBad, tailBad int) {
	t.Helper()
	rows, _, err := ReadAll(strings.NewReader(data), "f.log")
	if err != nil {
		var le *LineError
		require.ErrorAs(t, err, &le)
		fwdBad = le.Line
	}
	for _, r := range rows {
		if r.Job == job {
			r.Line = 0
			fwd = append(fwd, r)
		}
	}
	for _, needle := range []bool{true, false} {
		var got []Row
		var bad int
		var err error
		if needle {
			got, err = ReadJobTail(strings.NewReader(data), int64(len(data)), "f.log", job, nil)
		} else {
			// No needle: every line is read, as for an id the search cannot spell.
			got, err = readTail(strings.NewReader(data), int64(len(data)), "f.log", nil, func(r *Row) bool { return r.Job == job }, nil)
		}
		if err != nil {
			var le *LineError
			require.ErrorAs(t, err, &le)
			bad = le.Line
		}
		if needle {
			tail, tailBad = got, bad
		} else {
			assert.Equal(t, tail, got, "the tail read without a needle")
			assert.Equal(t, tailBad, bad, "the tail read without a needle")
		}
	}
	return fwd, tail, fwdBad, tailBad
}

const rowA1 = "job=a attempt=1 wait_s=1 elapsed_s=1 tokens=1"

// The clean-clone CI failure (FuzzJobTail): a row, a torn fragment, then
// the writer's torn marker whose own newline a crash cut off. The forward
// reader took the marker for a marker and skipped the fragment; the tail
// reader dropped the marker as a torn tail and refused the fragment with
// "line 2: expected key=value".
func TestJobTailTornFragmentThenUnterminatedMarker(t *testing.T) {
	data := rowA1 + "\na\n" + TornMarker
	fwd, tail, fwdBad, tailBad := readBoth(t, data, "a")
	assert.Zero(t, fwdBad)
	assert.Zero(t, tailBad, "the tail read refused a line the forward read skips as torn")
	require.Len(t, tail, 1)
	assert.Equal(t, fwd, tail)

	// The writer's next row repairs the tail with a marker of its own:
	// the fragment stays skipped, by both, and the new row is read.
	path := filepath.Join(t.TempDir(), "l.log")
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
	w := NewWriter(path, false)
	require.NoError(t, w.Append(Row{Job: "a", Attempt: 2, Wait: 1, Elapsed: 1, Tokens: 1}))
	require.NoError(t, w.Close())
	repaired, err := os.ReadFile(path)
	require.NoError(t, err)
	fwd, tail, fwdBad, tailBad = readBoth(t, string(repaired), "a")
	assert.Zero(t, fwdBad)
	assert.Zero(t, tailBad)
	require.Len(t, fwd, 2)
	assert.Equal(t, fwd, tail)
}

// Every rule about what a line is gives the same answer read forward and
// from the end: the rows of a job, or a refusal naming the same line.
func TestReadersAgreeOnEveryLineRule(t *testing.T) {
	long := "job=a note=" + strings.Repeat("x", MaxLine) // over MaxLine with its key
	pad := strings.Repeat(" ", 100)                      // blanks classifyLine trims
	for _, tc := range []struct {
		name, data string
		rows       int // of job a
		bad        int // the line both refuse, or 0
	}{
		{"unterminated marker", rowA1 + "\na\n" + TornMarker, 1, 0},
		{"unterminated marker with CR", rowA1 + "\na\n" + TornMarker + "\r", 1, 0},
		{"a marker twice (a torn marker repaired)", rowA1 + "\njob=a attempt=2 wait\n" + TornMarker + "\n" + TornMarker + "\n", 1, 0},
		{"a marker twice, the fragment holding the id", rowA1 + "\njob=a at\n" + TornMarker + "\n" + TornMarker + "\n" + "job=a attempt=2 wait_s=1 elapsed_s=1 tokens=1\n", 2, 0},
		{"marker under a blank line names nothing", rowA1 + "\na\n\n" + TornMarker + "\n", 0, 2},
		{"marker names only a row", rowA1 + "\n# a comment\n" + TornMarker + "\n", 1, 0},
		{"CRLF lines", rowA1 + "\r\na\r\n" + TornMarker + "\r\n", 1, 0},
		{"marker padded with blanks", rowA1 + "\njob=a attempt=2 wait\n" + pad + TornMarker + pad + "\n", 1, 0},
		{"unterminated marker padded with blanks", rowA1 + "\njob=a attempt=2 wait\n" + pad + TornMarker + pad, 1, 0},
		{"BOM at the start", "\uFEFF" + rowA1 + "\n", 1, 0},
		{"BOM opening a torn line", "\uFEFFjob=a at\n" + TornMarker + "\n" + rowA1 + "\n", 1, 0},
		{"BOM later is not dropped", rowA1 + "\n\uFEFFjob=a attempt=2 wait_s=1 elapsed_s=1 tokens=1\n", 1, 2},
		{"hand-written form", "job=a wait_s=18.0 elapsed_s=9.0 tokens=2400 decision=refuse: queue wait\n", 1, 0},
		{"indented comment and event", "  # note job=a\n# event breaker seat=a from=closed to=open ts=2026-01-01T00:00:00Z\n" + rowA1 + "\n", 1, 0},
		{"torn tail holding the id", rowA1 + "\njob=a attempt=2 wai", 1, 0},
		{"over-long torn tail", rowA1 + "\n" + long, 1, 0},
		{"over-long line", rowA1 + "\n" + long + "\n", 0, 2},
		{"over-long line above a marker is still refused", rowA1 + "\n" + long + "\n" + TornMarker + "\n", 0, 2},
		{"bad row", rowA1 + "\njob=a attempt=x wait_s=1 elapsed_s=1 tokens=1\n", 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fwd, tail, fwdBad, tailBad := readBoth(t, tc.data, "a")
			assert.Equal(t, tc.bad, fwdBad, "forward")
			assert.Equal(t, tc.bad, tailBad, "tail")
			if tc.bad == 0 {
				assert.Len(t, fwd, tc.rows)
				assert.Equal(t, fwd, tail)
			}
		})
	}
}

// classifyLine is the one place a line's kind is decided; this pins it.
func TestClassifyLine(t *testing.T) {
	for _, tc := range []struct {
		line       string
		terminated bool
		want       lineKind
	}{
		{TornMarker, true, lineMarker},
		{TornMarker, false, lineMarker},
		{"  " + TornMarker + "\r", true, lineMarker},
		{"a", false, lineTorn},
		{"# a comment", false, lineTorn},
		{" \r", false, lineSkip},
		{"", true, lineSkip},
		{"\t", true, lineSkip},
		{"# comment", true, lineSkip},
		{"#event breaker", true, lineSkip},
		{"# event breaker seat=s from=closed to=open ts=2026-01-01T00:00:00Z", true, lineEvent},
		{" # event x ts=2026-01-01T00:00:00Z\r", true, lineEvent},
		{"a", true, lineRow},
		{rowA1, true, lineRow},
	} {
		got, _ := classifyLine([]byte(tc.line), tc.terminated)
		assert.Equal(t, tc.want, got, "%q terminated=%v", tc.line, tc.terminated)
	}
	assert.Equal(t, lineBad, overLong(true))
	assert.Equal(t, lineTorn, overLong(false))
}
