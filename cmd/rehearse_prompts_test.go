package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// TestRehearsePromptSet: --prompts on the shipped set: rows carry
// prompt_sha and tags, never a word of any prompt; the same seed picks
// the same prompts, seq takes them in the file's order.
func TestRehearsePromptSet(t *testing.T) {
	dir := badDayConfig(t, "")
	set := repoPath(t, "testdata/prompts/mixed.jsonl")
	code, _, errOut := rehearseRun(t, dir, nil, "--prompts", set, "--jobs", "12", "--seed", "3", "--seat", "fallback-ok")
	require.Equal(t, 0, code, errOut)
	log, err := os.ReadFile(filepath.Join(dir, "rehearsal.log"))
	require.NoError(t, err)
	assert.Contains(t, string(log), " prompt_sha=")
	assert.Contains(t, string(log), " tags=")
	for _, w := range []string{"Summarise", "one short sentence", "retry budget seat"} {
		assert.NotContains(t, string(log), w, "no prompt text in the log")
	}

	shas := func(log string) []string {
		var out []string
		for _, l := range strings.Split(log, "\n") {
			if i := strings.Index(l, " prompt_sha="); i >= 0 {
				out = append(out, strings.Fields(l[i+1:])[0])
			}
		}
		return out
	}
	code, _, errOut = rehearseRun(t, dir, nil, "--prompts", set, "--jobs", "12", "--seed", "3", "--seat", "fallback-ok", "--log", "again.log")
	require.Equal(t, 0, code, errOut)
	again, _ := os.ReadFile(filepath.Join(dir, "again.log"))
	assert.Equal(t, shas(string(log)), shas(string(again)), "same seed: same prompts")

	code, _, errOut = rehearseRun(t, dir, nil, "--prompts", set, "--jobs", "3", "--prompt-order", "seq", "--seat", "fallback-ok", "--log", "seq.log")
	require.Equal(t, 0, code, errOut)
	seqLog, _ := os.ReadFile(filepath.Join(dir, "seq.log"))
	prompts, err := rehearse.LoadPrompts(set, 1<<20)
	require.NoError(t, err)
	var want []string
	for _, p := range prompts[:3] {
		want = append(want, "prompt_sha="+seat.PromptSHA(p.Prompt, p.Messages))
	}
	assert.Equal(t, want, shas(string(seqLog)), "seq: the file's first three, one job each")
}

// TestRehearsePromptSetBad: a bad prompt set is exit 2 naming file:line
// and the field, before the log is touched.
func TestRehearsePromptSetBad(t *testing.T) {
	dir := badDayConfig(t, "")
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"prompt": "ok"}`+"\n"+`{"prompt": "x", "max_tokens": -4}`+"\n"), 0o644))
	code, _, errOut := rehearseRun(t, dir, nil, "--prompts", bad)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "bad.jsonl:2: max_tokens")
	assert.NoFileExists(t, filepath.Join(dir, "rehearsal.log"))

	code, _, errOut = rehearseRun(t, dir, nil, "--prompts", bad, "--prompt", "hi")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--prompts and --prompt")
}
