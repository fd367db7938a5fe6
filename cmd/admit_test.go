package cmd

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exampleCommands is the commands of a --help Example block: each
// `retrygate ...` line with its backslash continuations joined, split
// into arguments (the examples quote nothing).
func exampleCommands(t *testing.T, example string) [][]string {
	t.Helper()
	var out [][]string
	var cur string
	for _, line := range strings.Split(example, "\n") {
		line = strings.TrimSpace(line)
		if cur == "" && !strings.HasPrefix(line, "retrygate ") {
			continue
		}
		cont := strings.HasSuffix(line, `\`)
		cur += " " + strings.TrimSuffix(line, `\`)
		if !cont {
			require.NotContains(t, cur, `"`, "an example with quotes needs a real shell")
			out = append(out, strings.Fields(cur)[1:])
			cur = ""
		}
	}
	return out
}

// The examples of `retrygate admit --help` run as shown: the free-seat
// demo's second attempt is refused for its queue wait (exit 1, with the
// seed's 37.8 s and 5900 tokens left), and the same job from the log that
// record's own example writes is admitted by the log's estimate.
func TestAdmitHelpExamplesRun(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("RETRYGATE_LOG", "")
	f := &Factory{}
	admitEx := exampleCommands(t, newAdmitCmd(f, nil).Example)
	recordEx := exampleCommands(t, newRecordCmd(f, nil).Example)
	require.Len(t, admitEx, 2)
	require.Len(t, recordEx, 1)

	code, out, errOut := run(t, admitEx[0]...)
	assert.Equal(t, 1, code, "stderr: %s", errOut)
	assert.True(t, strings.HasPrefix(out, "refuse: queue wait\n"), out)
	assert.Contains(t, out, "deadline\t45.000s\t7.200s\t\t37.800s\n")
	assert.Contains(t, out, "tokens\t8000\t2100\t2400\t5900\n")

	code, _, errOut = run(t, recordEx[0]...)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	_, err := os.Stat("rehearsal.log")
	require.NoError(t, err)
	code, out, errOut = run(t, admitEx[1]...)
	assert.Equal(t, 0, code, "stderr: %s", errOut)
	assert.True(t, strings.HasPrefix(out, "admit\n"), out)
}

// The help describes check 3 as the code runs it: the next wait plus the
// next generation time, the wait counted once.
func TestAdmitHelpCheck3IsWaitPlusGen(t *testing.T) {
	long := newAdmitCmd(&Factory{}, nil).Long
	assert.Contains(t, long, "3. next wait + next gen > time left")
	assert.NotContains(t, long, "next wait + next elapsed")
}
