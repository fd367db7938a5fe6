package ledgerfile

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSeedHandLine(t *testing.T) {
	var r Row
	require.NoError(t, ParseLine([]byte("wait_s=18.0 elapsed_s=9.0 tokens=2400 decision=refuse: queue wait"), &r))
	require.Equal(t, "refuse: queue wait", r.Decision)
	require.Equal(t, int64(2400), r.Tokens)
	line := FormatRow(&r)
	require.Equal(t, `wait_s=18.000 elapsed_s=9.000 tokens=2400 decision="refuse: queue wait"`, line)
	rows, rd, err := ReadAll(strings.NewReader("# c\n\n"+line+"\nwait_s=1 elapsed_s=2 tokens=3 foo=bar\nwait_s=1 elapsed"), "x.log")
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, 3, rows[0].Line)
	require.Len(t, rd.Torn(), 1)
	require.Equal(t, 5, rd.Torn()[0].Line)
	_, _, err = ReadAll(strings.NewReader("wait_s=abc elapsed_s=1 tokens=1\n"), "x.log")
	require.EqualError(t, err, `x.log: line 1: wait_s: not a number "abc"`)
}
