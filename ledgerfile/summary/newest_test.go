package summary

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"retrygate/ledgerfile"
)

// A relative --since counts back from the newest row the strict read
// reads: a torn line the writer's marker names is not one, even when the
// crash also cut off the marker's newline.
func TestNewestTSSkipsTheLineATornMarkerNames(t *testing.T) {
	row := "ts=2026-01-01T00:00:00Z wait_s=1 elapsed_s=1 tokens=1\n"
	torn := "ts=2030-01-01T00:00:00Z wait_s=1 elap"
	for _, log := range []string{
		row + torn + "\n" + ledgerfile.TornMarker + "\n",
		row + torn + "\n" + ledgerfile.TornMarker,
		row + torn + "\r\n" + ledgerfile.TornMarker + "\r\n",
	} {
		ts, ok, err := NewestTS(strings.NewReader(log))
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), ts, "%q", log)
	}
	// A marker under a blank line names nothing.
	ts, _, err := NewestTS(strings.NewReader(row + "ts=2027-01-01T00:00:00Z wait_s=1 elapsed_s=1 tokens=1\n\n" + ledgerfile.TornMarker + "\n"))
	require.NoError(t, err)
	assert.Equal(t, 2027, ts.Year())
}
