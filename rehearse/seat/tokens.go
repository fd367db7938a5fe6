package seat

import (
	"bytes"
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"

	"github.com/retrygate/retrygate/admit"
)

// Encodings the tokenizer knows, for config errors.
const knownEncodings = "cl100k_base, o200k_base, p50k_base, p50k_edit or r50k_base"

var (
	codecMu sync.Mutex
	codecs  = map[tokenizer.Encoding]tokenizer.Codec{}
)

// codecFor picks the local tokenizer for a seat: the encoding override
// when set, else the model's encoding when the tokenizer knows the model,
// else cl100k_base. Codecs are shared (they are safe for concurrent use,
// and each compiles its split pattern). An encoding's BPE vocabulary, the
// costly part (most of a short run's CPU and about 14 MiB), is built once
// by the tokenizer, on first use: seats hold a lazyCodec and build it
// only when an answer lacks usage.
func codecFor(model, encoding string) (tokenizer.Codec, error) {
	if err := checkEncoding(encoding); err != nil {
		return nil, err
	}
	codecMu.Lock()
	defer codecMu.Unlock()
	key := tokenizer.Encoding(encoding)
	if encoding == "" {
		key = tokenizer.Encoding("model:" + model)
	}
	if c, ok := codecs[key]; ok {
		return c, nil
	}
	var c tokenizer.Codec
	var err error
	if encoding != "" {
		c, err = tokenizer.Get(tokenizer.Encoding(encoding))
	} else if c, err = tokenizer.ForModel(tokenizer.Model(model)); err != nil {
		c, err = tokenizer.Get(tokenizer.Cl100kBase)
	}
	if err != nil {
		return nil, fmt.Errorf("unknown encoding %q (want %s)", encoding, knownEncodings)
	}
	c.SetErrorMode(tokenizer.ErrorModeReplace) // a hostile stream's bad bytes count as U+FFFD
	codecs[key] = c
	return c, nil
}

// checkEncoding accepts "" or an encoding the tokenizer builds, without
// building it.
func checkEncoding(encoding string) error {
	switch tokenizer.Encoding(encoding) {
	case "", tokenizer.Cl100kBase, tokenizer.O200kBase, tokenizer.P50kBase, tokenizer.P50kEdit, tokenizer.R50kBase:
		return nil
	}
	return fmt.Errorf("unknown encoding %q (want %s)", encoding, knownEncodings)
}

// counter is what counting needs of a tokenizer.
type counter interface {
	Count(string) (int, error)
}

// lazyCodec is a seat's tokenizer, built on its first Count: after an
// attempt's timed window, and only for an answer without usage.
type lazyCodec struct {
	model, encoding string
	once            sync.Once
	c               tokenizer.Codec
}

func newLazyCodec(model, encoding string) (*lazyCodec, error) {
	if err := checkEncoding(encoding); err != nil {
		return nil, err
	}
	return &lazyCodec{model: model, encoding: encoding}, nil
}

func (l *lazyCodec) Count(s string) (int, error) {
	l.once.Do(func() { l.c, _ = codecFor(l.model, l.encoding) })
	if l.c == nil {
		return 0, fmt.Errorf("no tokenizer")
	}
	return l.c.Count(s)
}

// countTokens counts s with c; a tokenizer error (none is expected in
// replace mode) falls back to the rough estimate rather than zero.
func countTokens(c counter, s string) int64 {
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

// counterHold is how much streamed text a counter keeps. Nothing is
// counted while the answer streams (the timed window): the held text is
// counted after it, and text past the hold is estimated at the held
// text's own tokens per byte.
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
func countText(c counter, b []byte, stop func() bool) int64 {
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

// streamCounter keeps the first counterHold bytes of the streamed text
// and the length of the rest; total counts them once the timed window
// has closed.
type streamCounter struct {
	codec counter
	stop  func() bool // nil: never give up
	held  []byte
	over  int64 // bytes past the hold, not kept
}

func (c *streamCounter) add(s string) {
	if room := counterHold - len(c.held); room > 0 {
		n := min(room, len(s))
		c.held = append(c.held, s[:n]...)
		s = s[n:]
	}
	c.over += int64(len(s))
}

// total counts what is held and extrapolates the rest.
func (c *streamCounter) total() int64 {
	return c.extrapolate(countText(c.codec, c.held, c.stop))
}

// extrapolate is the whole text's count from n, the held text's: the
// text past the hold at the held text's own tokens per byte. It empties
// the counter.
func (c *streamCounter) extrapolate(n int64) int64 {
	if c.over > 0 && len(c.held) > 0 {
		hi, lo := bits.Mul64(uint64(n), uint64(c.over))
		if hi < uint64(len(c.held)) {
			q, _ := bits.Div64(hi, lo, uint64(len(c.held)))
			n = admit.AddTokens(n, int64(min(q, uint64(admit.MaxTokens))))
		} else {
			n = admit.MaxTokens
		}
	}
	c.held, c.over = c.held[:0], 0
	return admit.ClampTokens(n)
}
