package cmd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --log names a log: every writer refuses a file that is something else
// (a config, notes), exit 2, naming it and what it looks like, and
// leaves it as it was.
func TestLogTargetMustBeALog(t *testing.T) {
	dir := t.TempDir()
	const config = "budget:\n  deadline: 45s\n"
	const notes = "Meeting notes\nretry less\n"
	for _, tc := range []struct {
		name string
		args []string
		file string
		text string
		want string
	}{
		{"rehearse onto a config", []string{"rehearse", "--jobs", "1", "--log", "p.yaml"}, "p.yaml", config, "YAML"},
		{"rehearse onto notes", []string{"rehearse", "--jobs", "1", "--log", "notes.txt"}, "notes.txt", notes, "text"},
		{"record onto a config", []string{"record", "--log", "p.yaml", "--job", "j", "--wait", "1", "--elapsed", "2", "--tokens", "10"},
			"p.yaml", config, "YAML"},
		{"log import onto notes", []string{"log", "import", "../testdata/logs/seed003.log", "notes.txt"}, "notes.txt", notes, "text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, dir, tc.file, tc.text)
			args := tc.args
			if args[0] == "log" {
				args = append([]string{}, args...)
				args[2] = repoPath(t, "testdata/logs/seed003.log")
			}
			code, out, errOut := cfgRun(t, dir, nil, args...)
			assert.Equal(t, ExitBad, code, errOut)
			assert.Empty(t, out)
			assert.Contains(t, errOut, `refusing to append to "`+tc.file+`": it looks like `+tc.want+", not a rehearsal log")
			data, err := os.ReadFile(filepath.Join(dir, tc.file))
			require.NoError(t, err)
			assert.Equal(t, tc.text, string(data), "the file is untouched")
		})
	}
	// A log from before the header existed is still a log to append to.
	golden, err := os.ReadFile(repoPath(t, "testdata/golden/rehearse/bad-day.log"))
	require.NoError(t, err)
	writeFile(t, dir, "old.log", string(golden))
	code, _, errOut := cfgRun(t, dir, nil, "rehearse", "--jobs", "1", "--log", "old.log")
	assert.Equal(t, ExitOK, code, errOut)
}
