package seat

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCodecFor(t *testing.T) {
	tests := []struct{ model, encoding, want string }{
		{"gpt-4o-mini", "", "o200k_base"},
		{"gpt-4", "", "cl100k_base"},
		{"gpt-3.5-turbo-0125", "", "cl100k_base"},
		{"llama3.2", "", "cl100k_base"},          // unknown to the tokenizer: the fallback
		{"claude-sonnet-4-5", "", "cl100k_base"}, // likewise
		{"llama3.2", "o200k_base", "o200k_base"}, // the override wins
		{"gpt-4o", "p50k_base", "p50k_base"},
	}
	for _, tt := range tests {
		c, err := codecFor(tt.model, tt.encoding)
		require.NoError(t, err)
		assert.Equal(t, tt.want, c.GetName(), tt.model)
	}
	_, err := codecFor("gpt-4o", "gpt2")
	assert.EqualError(t, err, `unknown encoding "gpt2" (want cl100k_base, o200k_base, p50k_base, p50k_edit or r50k_base)`)
}

// TestStreamCounterBounded: the counter keeps at most counterHold bytes,
// counts nothing while text streams in (the timed window), and its total
// lands within 2% of counting the whole text at once.
func TestStreamCounterBounded(t *testing.T) {
	codec, err := codecFor("", "cl100k_base")
	require.NoError(t, err)
	words := strings.Fields("retries are not free they cost time and tokens and the clock keeps running while the queue waits")
	var whole strings.Builder
	counted := &countingCodec{c: codec}
	c := streamCounter{codec: counted}
	maxHeld := 0
	for i := 0; whole.Len() < 5*counterHold; i++ {
		piece := " " + words[i%len(words)]
		if i%97 == 0 {
			piece += ".\n"
		}
		whole.WriteString(piece)
		c.add(piece)
		maxHeld = max(maxHeld, len(c.held))
	}
	assert.Zero(t, counted.calls, "nothing is counted while the answer streams")
	want := countTokens(codec, whole.String())
	got := c.total()
	assert.LessOrEqual(t, maxHeld, counterHold)
	assert.InEpsilon(t, want, got, 0.02)
	assert.Empty(t, c.held)

	// A stream with no spaces at all is still cut, at rune boundaries.
	c = streamCounter{codec: codec}
	for i := 0; i < 3*counterHold/3; i++ {
		c.add("日本語")
	}
	assert.Positive(t, c.total())
}

type countingCodec struct {
	c     counter
	calls int
}

func (c *countingCodec) Count(s string) (int, error) { c.calls++; return c.c.Count(s) }

// TestTokenizerIsLazy: building a seat builds no vocabulary; an answer
// with usage never builds one.
func TestTokenizerIsLazy(t *testing.T) {
	l, err := newLazyCodec("gpt-4o-mini", "")
	require.NoError(t, err)
	assert.Nil(t, l.c, "not built at construction")
	n, err := l.Count("hello there")
	require.NoError(t, err)
	assert.Positive(t, n)
	assert.Equal(t, "o200k_base", l.c.GetName())
	_, err = newLazyCodec("gpt-4o", "gpt2")
	assert.Error(t, err)
}

// TestCountingGivesUpAfterCancellation: once the attempt is cancelled,
// counting stops within countGrace and estimates the rest, so a timed-out
// attempt against a flood of output (or a huge prompt) returns at once.
func TestCountingGivesUpAfterCancellation(t *testing.T) {
	codec, err := codecFor("", "cl100k_base")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stop := stopCounting(ctx)
	big := []byte(strings.Repeat("tokens cost time ", 1<<20)) // 17 MiB
	start := time.Now()
	n := countText(codec, big, stop)
	took := time.Since(start)
	assert.Less(t, took, countGrace+lateTol+time.Second/4, "counting did not give up")
	assert.InDelta(t, float64(len(big))/4, float64(n), float64(len(big))/8, "the rest is estimated")

	// Without cancellation the same function counts exactly.
	small := []byte(strings.Repeat("tokens cost time ", 2000))
	assert.Equal(t, countTokens(codec, string(small)), countText(codec, small, stopCounting(context.Background())))
}
