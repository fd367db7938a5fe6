package seat

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each count keeps its own source: a stream cut after the prompt's usage
// came (Anthropic's message_start) but before the completion's is mixed.
func TestTokenSourcesPerCount(t *testing.T) {
	codec, err := newLazyCodec("gpt-4o-mini", "")
	require.NoError(t, err)
	for _, tc := range []struct {
		name             string
		st               stream
		from, prom, comp string
	}{
		{"both from usage", stream{prompt: 12, completion: 5, hasPrompt: true, hasCompl: true}, FromUsage, "", ""},
		{"neither", stream{}, FromTokenizer, "", ""},
		{"prompt from usage only", stream{prompt: 12, hasPrompt: true}, FromMixed, FromUsage, FromTokenizer},
	} {
		var obs Observation
		st := tc.st
		fillTokens(&obs, &st, codec, "a short prompt")
		assert.Equal(t, tc.from, obs.TokensFrom, tc.name)
		assert.Equal(t, tc.prom, obs.PromptFrom, tc.name)
		assert.Equal(t, tc.comp, obs.CompletionFrom, tc.name)
	}
}
