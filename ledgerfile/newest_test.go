package ledgerfile

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewestTS(t *testing.T) {
	f, err := os.Open("../testdata/logs/mixed.log")
	require.NoError(t, err)
	defer f.Close()
	ts, ok, err := NewestTS(f, "r.log")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, time.Date(2025, 6, 2, 10, 5, 0, 0, time.UTC), ts)

	_, ok, err = NewestTS(strings.NewReader("wait_s=1 elapsed_s=1 tokens=1\n# ts=2030-01-01T00:00:00Z\nts=2031-01-01T00:00:00Z wait_s=1"), "r.log")
	require.NoError(t, err)
	assert.False(t, ok, "comments and a torn last line do not count")
}

// A relative --since counts back from the newest row the strict read
// reads: a torn line the writer's marker names is not one, even when the
// crash also cut off the marker's newline.
func TestNewestTSSkipsTheLineATornMarkerNames(t *testing.T) {
	row := "ts=2026-01-01T00:00:00Z wait_s=1 elapsed_s=1 tokens=1\n"
	torn := "ts=2030-01-01T00:00:00Z wait_s=1 elap"
	for _, log := range []string{
		row + torn + "\n" + TornMarker + "\n",
		row + torn + "\n" + TornMarker,
		row + torn + "\r\n" + TornMarker + "\r\n",
	} {
		ts, ok, err := NewestTS(strings.NewReader(log), "r.log")
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), ts, "%q", log)
	}
	// A marker under a blank line names nothing.
	ts, _, err := NewestTS(strings.NewReader(row+"ts=2027-01-01T00:00:00Z wait_s=1 elapsed_s=1 tokens=1\n\n"+TornMarker+"\n"), "r.log")
	require.NoError(t, err)
	assert.Equal(t, 2027, ts.Year())
}

// NewestTS reads a row's ts as the strict read does: the first row's
// after a byte order mark, a long row's, and never a "ts=" inside a
// quoted value or a ts the log's range refuses.
func TestNewestTSReadsTheTSTheStrictReadReads(t *testing.T) {
	row := func(ts, rest string) string { return "ts=" + ts + " wait_s=1 elapsed_s=1 tokens=1" + rest + "\n" }
	for name, c := range map[string]struct {
		log  string
		want int
	}{
		"byte order mark":   {"\uFEFF" + row("2030-01-01T00:00:00Z", "") + row("2026-01-01T00:00:00Z", ""), 2030},
		"a long row":        {row("2026-01-01T00:00:00Z", "") + row("2030-01-01T00:00:00Z", ` note="`+strings.Repeat("x", 100<<10)+`"`), 2030},
		"ts= in a value":    {row("2026-01-01T00:00:00Z", "") + "wait_s=1 elapsed_s=1 tokens=1 note=\"see ts=2031-01-01T00:00:00Z\"\n", 2026},
		"a ts out of range": {row("2026-01-01T00:00:00Z", "") + row("9999-12-31T23:00:00-05:00", ""), 2026},
	} {
		ts, ok, err := NewestTS(strings.NewReader(c.log), "r.log")
		require.NoError(t, err, name)
		assert.True(t, ok, name)
		assert.Equal(t, c.want, ts.Year(), name)
	}
	// A line past MaxLine is no row, and the read goes on.
	ts, _, err := NewestTS(strings.NewReader(row("2026-01-01T00:00:00Z", "")+"ts=2030-01-01T00:00:00Z "+strings.Repeat("x", MaxLine)+"\n"+row("2027-01-01T00:00:00Z", "")), "r.log")
	require.NoError(t, err)
	assert.Equal(t, 2027, ts.Year())
}
