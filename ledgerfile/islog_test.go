package ledgerfile

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A writer appends only to an empty file or a log: a config, notes or a
// secrets file named as the log is refused whole, unchanged, and never
// quoted.
func TestWriterAppendsOnlyToALog(t *testing.T) {
	row := Row{TS: time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC), Job: "j", Attempt: 1, Seat: "s", Wait: time.Second,
		Elapsed: 2 * time.Second, Tokens: 10, Decision: "admit"}
	for _, tc := range []struct{ name, text, looks string }{
		{"retrygate.yaml", "budget:\n  deadline: 45s\n", "YAML"},
		{"commented.yaml", "# my policy\n\nbudget: {deadline: 45s}\n", "YAML"},
		{"list.yaml", "---\n- a\n", "YAML"},
		{"p.json", "{\"budget\": {}}\n", "JSON"},
		{"p.toml", "[budget]\ndeadline = \"45s\"\n", "TOML"},
		{"q.toml", "log = \"x\"\n", "TOML"},
		{".env", "OPENAI_API_KEY=sk-live-abcdef123456\n", "an environment file"},
		{"notes.txt", "Meeting notes\nretry less\n", "text"},
		{"notes.md", "# Notes\nsk-live-abcdef123456 was rotated\n", "text"},
		{"blob", "\x00\x01\x02=\n", "binary data"},
		{"one line, no newline", "budget: {deadline: 45s}", "YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.name)
			require.NoError(t, os.WriteFile(path, []byte(tc.text), 0o600))
			w := NewWriter(path, false)
			err := w.Append(row)
			require.ErrorIs(t, err, ErrNotALog)
			assert.ErrorContains(t, err, `refusing to append to "`+path+`": it looks like `+tc.looks+", not a rehearsal log")
			assert.NotContains(t, err.Error(), "abcdef")
			require.NoError(t, w.Close())
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tc.text, string(data), "the file is untouched")
		})
	}

	// Every log in testdata, those written before the header existed too,
	// an empty file, comments alone, and a log whose only row was torn.
	logs, err := filepath.Glob("../testdata/logs/*.log")
	require.NoError(t, err)
	golden, err := filepath.Glob("../testdata/golden/*/*.log")
	require.NoError(t, err)
	require.NotEmpty(t, golden)
	texts := map[string]string{"empty": "", "comments": "# a note\n\n", "torn": Header + "\nts=2026-03-14T09:00:00Z job=j wai",
		"torn first": "x\n" + TornMarker + "\nwait_s=1 elapsed_s=1 tokens=1\n", "a bad value": "wait_s=1 elapsed_s=1 tokens=9e99\n"}
	for _, p := range append(logs, golden...) {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		texts[p] = string(data)
	}
	for name, text := range texts {
		path := filepath.Join(t.TempDir(), "r.log")
		require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
		w := NewWriter(path, false)
		assert.NoError(t, w.Append(row), name)
		require.NoError(t, w.Close())
	}
}
