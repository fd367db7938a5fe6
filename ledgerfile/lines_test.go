package ledgerfile

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// The highest run number is read from the `# run` lines the reader
// classifies as comments and from rN-k job ids, leniently.
func TestHighestRun(t *testing.T) {
	for _, tc := range []struct {
		log  string
		want int
	}{
		{"", 0},
		{Header + "\n# run r3 seed=1\n", 3},
		{"ts=2025-01-01T00:00:00Z job=r7-01 attempt=1 wait_s=1 elapsed_s=1 tokens=1\n# run r2\n", 7},
		{"job=\"r12-1\" wait_s=1 elapsed_s=1 tokens=1\n", 12},
		{"job=run-1 wait_s=1\nmyjob=r99-1\nwait_s=18.0 elapsed_s=9.0 tokens=2400 decision=refuse: queue wait\n", 0},
		{"job=r1234567890123-1\n", 0},
		{"job=r5-1 torn without newline", 5},
		{"# event breaker seat=s from=closed to=open ts=2026-01-01T00:00:00Z\n# run r4\n", 4},
		{"# runner r9\n# run r9x\n", 0},
	} {
		got, err := HighestRun(strings.NewReader(tc.log))
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, tc.log)
	}
}

// Each comment line's encoder and decoder round-trip (STYLE.md 7), and
// the decoders take the line as the reader hands it on ("# " and all).
func TestRunAndPolicyLinesRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		run := rapid.IntRange(1, 999_999_999).Draw(t, "run")
		desc := rapid.StringMatching(`[a-z0-9=.,:_ -]{0,40}`).Draw(t, "describe")
		n, d, ok := ParseRun(CommentLine(RunText(run, desc)))
		if !ok || n != run || d != strings.TrimSpace(desc) {
			t.Fatalf("run line %q read as %d %q %v", RunText(run, desc), n, d, ok)
		}
		var kvs []KV
		for i := range rapid.IntRange(0, 8).Draw(t, "keys") {
			kvs = append(kvs, KV{"k." + rapid.StringMatching(`[a-z][a-z_.]{0,20}`).Draw(t, "key") + string(rune('a'+i)),
				rapid.StringMatching(`[a-z0-9 ;<=%.()"]{0,20}`).Draw(t, "value")})
		}
		text := PolicyText(run, kvs)
		p, ok := ParsePolicy(CommentLine(text))
		if !ok || p.Run != run || len(p.Hash) != 12 {
			t.Fatalf("policy line %q read as %+v", text, p)
		}
		if len(kvs) > 0 || len(p.KVs) > 0 {
			assert.Equal(t, kvs, p.KVs)
		}
	})
	_, _, ok := ParseRun("# policy run=r1")
	assert.False(t, ok)
	_, ok = ParsePolicy("# run r1")
	assert.False(t, ok)
}
