package seat

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each count keeps its own source: a stream cut after the prompt's usage
// came (Anthropic's message_start) but before the completion's is mixed,
// its completion an estimate.
func TestTokenSourcesPerCount(t *testing.T) {
	codec, err := newLazyCodec("gpt-4o-mini", "")
	require.NoError(t, err)
	withUsage := func(prompt, compl bool) stream {
		var st stream
		if prompt {
			st.usage.set(uPrompt, 12)
		}
		if compl {
			st.usage.set(uCompletion, 5)
		}
		return st
	}
	for _, tc := range []struct {
		name             string
		st               stream
		cut              bool
		from, prom, comp string
	}{
		{"both from usage", withUsage(true, true), false, FromUsage, "", ""},
		{"neither", withUsage(false, false), false, FromTokenizer, "", ""},
		{"prompt from usage only", withUsage(true, false), false, FromMixed, FromUsage, FromTokenizer},
		{"cut, prompt from usage only", withUsage(true, false), true, FromMixed, FromUsage, FromEstimate},
		{"cut, neither", withUsage(false, false), true, FromEstimate, "", ""},
		{"cut, both from usage", withUsage(true, true), true, FromUsage, "", ""},
	} {
		var obs Observation
		st := tc.st
		st.counter.codec = codec
		s := &httpSeat{codec: codec, cfg: Config{Kind: "openai"}}
		s.charge(context.Background(), context.Background(), &obs, &st, Request{Prompt: "a short prompt"}, tc.cut, true)
		assert.Equal(t, tc.from, obs.TokensFrom, tc.name)
		assert.Equal(t, tc.prom, obs.PromptFrom, tc.name)
		assert.Equal(t, tc.comp, obs.CompletionFrom, tc.name)
	}
}
