package seat

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

// Encodings the tokenizer knows, for config errors.
const knownEncodings = "cl100k_base, o200k_base, p50k_base, p50k_edit or r50k_base"

var (
	codecMu sync.Mutex
	codecs  = map[tokenizer.Encoding]tokenizer.Codec{}
)

// codecFor picks the local tokenizer for a seat: the encoding override
// when set, else the model's encoding when the tokenizer knows the model,
// else cl100k_base. Codecs are shared (they are safe for concurrent use
// and their vocabularies are large).
func codecFor(model, encoding string) (tokenizer.Codec, error) {
	enc := tokenizer.Encoding(encoding)
	if encoding == "" {
		enc = tokenizer.Cl100kBase
		if c, err := tokenizer.ForModel(tokenizer.Model(model)); err == nil {
			enc = tokenizer.Encoding(c.GetName())
		}
	}
	codecMu.Lock()
	defer codecMu.Unlock()
	if c, ok := codecs[enc]; ok {
		return c, nil
	}
	c, err := tokenizer.Get(enc)
	if err != nil {
		return nil, fmt.Errorf("unknown encoding %q (want %s)", encoding, knownEncodings)
	}
	c.SetErrorMode(tokenizer.ErrorModeReplace) // a hostile stream's bad bytes count as U+FFFD
	codecs[enc] = c
	return c, nil
}

// countTokens counts s with c; a tokenizer error (none is expected in
// replace mode) falls back to the rough estimate rather than zero.
func countTokens(c tokenizer.Codec, s string) int64 {
	n, err := c.Count(s)
	if err != nil {
		return estimateTokens(len(s))
	}
	return int64(n)
}

// estimateTokens is the rough rule for text left uncounted: four bytes a
// token.
func estimateTokens(bytes int) int64 { return int64(bytes+3) / 4 }

// countBlock is how much text one tokenizer call sees at most, so a
// cancelled attempt waits for at most one block's count before it gives
// up counting (see stopCounting).
const countBlock = 8 << 10

// counterHold is how much streamed text a counter keeps before counting
// blocks of it. Completions shorter than this are counted once, after the
// last byte, so counting never slows the stream being timed.
const counterHold = 64 << 10

// countGrace is how long counting may carry on after the attempt was
// cancelled; text still uncounted then is estimated, so Do returns at
// once rather than after tokenizing a long prompt or a flood of output.
const countGrace = 50 * time.Millisecond

// stopCounting returns a check for the counting loops: false while ctx
// lives, and for countGrace after it was first seen done. It is used by
// one goroutine at a time.
func stopCounting(ctx context.Context) func() bool {
	var seen time.Time
	return func() bool {
		if ctx.Err() == nil {
			return false
		}
		if seen.IsZero() {
			seen = time.Now()
		}
		return time.Since(seen) > countGrace
	}
}

// cutAt picks where to end a block of at most countBlock bytes of b: at
// its last space (a cut before a word is where the encodings split words
// anyway, so the total is exact or off by a token a cut), else at a rune
// boundary.
func cutAt(b []byte) int {
	if len(b) <= countBlock {
		return len(b)
	}
	if i := bytes.LastIndexByte(b[:countBlock], ' '); i > 0 {
		return i
	}
	i := countBlock
	for i > 0 && !utf8.RuneStart(b[i]) {
		i--
	}
	if i == 0 {
		return countBlock
	}
	return i
}

// countText counts b block by block; once stop says so, the rest is
// estimated.
func countText(c tokenizer.Codec, b []byte, stop func() bool) int64 {
	var n int64
	for len(b) > 0 {
		if stop != nil && stop() {
			return n + estimateTokens(len(b))
		}
		cut := cutAt(b)
		n += countTokens(c, string(b[:cut]))
		b = b[cut:]
	}
	return n
}

// streamCounter counts completion tokens as text streams in, keeping at
// most about counterHold bytes: past that, blocks are counted and dropped.
type streamCounter struct {
	codec tokenizer.Codec
	stop  func() bool // nil: never give up
	held  []byte
	n     int64
}

func (c *streamCounter) add(s string) {
	c.held = append(c.held, s...)
	if len(c.held) <= counterHold {
		return
	}
	done := 0
	for len(c.held)-done > counterHold {
		if c.stop != nil && c.stop() {
			c.n += estimateTokens(len(c.held) - done)
			done = len(c.held)
			break
		}
		cut := cutAt(c.held[done:])
		c.n += countTokens(c.codec, string(c.held[done:done+cut]))
		done += cut
	}
	c.held = append(c.held[:0], c.held[done:]...)
}

// total counts what is held and returns the running total.
func (c *streamCounter) total() int64 {
	c.n += countText(c.codec, c.held, c.stop)
	c.held = c.held[:0]
	return c.n
}
