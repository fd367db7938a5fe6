package seat

import (
	"errors"
	"io"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// stream is what has been read of one answer so far: its text, its
// usage, and how it ended.
type stream struct {
	counter    streamCounter
	onContent  func()
	content    bool
	usage      usage
	failed     bool // the stream carried an error event
	code       string
	incomplete bool   // the answer ended short and said so (Responses' status incomplete)
	reason     string // incomplete_details.reason: max_output_tokens, content_filter
	// done is the terminal event (data: [DONE], message_stop, done: true,
	// the Responses API's terminal event): nothing is read after it.
	done bool
	// finished is the answer saying it ended, before its terminal event:
	// a finish_reason, a stop_reason. With done, it is what makes a
	// stream whole.
	finished  bool
	bad       int  // malformed events, tolerated
	chunkText bool // the event being read carried text
	itl       itlGaps
	// onComplete, when set, is told after each event read while the
	// answer is complete and its terminal event has not come (see
	// complete); heldOpen, that it ended the read for that (tailCut).
	onComplete func()
	heldOpen   func() bool
}

// whole says the answer said it ended: a stream that ends cleanly
// without this was cut short, whatever it carried (a chat stream with
// neither a finish reason nor [DONE], an Anthropic one with neither a
// stop_reason nor message_stop, an Ollama one without done: true, a
// Responses one without its terminal event).
func (st *stream) whole() bool { return st.done || st.finished }

// complete says the answer said it ended (its finish reason) before its
// terminal event (data: [DONE], message_stop): nothing is left to read
// but its usage, which follows at once when it comes at all, and that
// event, which a server may send late, or never while it holds the
// connection open. Such an answer ends whole within TailGrace of its
// last event: it is whole by the one rule (whole), usage or not.
func (st *stream) complete() bool { return st.finished && !st.done }

// text records generated text (content, reasoning or tool-call
// arguments): the first non-empty piece is the answer's first token.
func (st *stream) text(s string) {
	if s == "" {
		return
	}
	if !st.content {
		st.content = true
		st.onContent()
	}
	st.chunkText = true
	st.counter.add(s)
}

// fail records an error event in an otherwise successful stream.
func (st *stream) fail(code string) {
	if !st.failed {
		st.failed, st.code = true, code
	}
}

// usageField is one count a usage object reports.
type usageField uint8

const (
	uPrompt     usageField = iota // the whole prompt (Chat Completions, Responses, Ollama)
	uInput                        // Anthropic's input_tokens: the prompt's part beside the cache's
	uCached                       // input read from the prompt cache
	uCacheWrite                   // input written to the prompt cache
	uCompletion                   // the whole completion
	uReasoning                    // reasoning, inside the completion
	usageFields
)

// usage is an answer's counts merged by field: each is the last event's
// that reports it, except that no event lowers what an earlier one said.
// Every format here reports running totals (Anthropic's message_delta
// says so outright), so a lower count later is a partial report, not a
// correction: a message_delta's input_tokens 0, or 900 beside a
// message_start's 1000 and its cache fields, leaves message_start's.
type usage struct {
	n   [usageFields]int64
	has [usageFields]bool
	// beside: the cache fields sit beside uInput (Anthropic's), and the
	// prompt is their sum; otherwise they are parts inside uPrompt.
	beside bool
}

func (u *usage) set(f usageField, v int64) {
	if !u.has[f] || v > u.n[f] {
		u.n[f] = v
	}
	u.has[f] = true
}

// prompt is the prompt's count, ok when the usage reported one.
func (u *usage) prompt() (n int64, ok bool) {
	if u.has[uPrompt] {
		return u.n[uPrompt], true
	}
	if !u.beside {
		return 0, false
	}
	for _, f := range [...]usageField{uInput, uCacheWrite, uCached} {
		if u.has[f] {
			n, ok = admit.AddTokens(n, u.n[f]), true
		}
	}
	return n, ok
}

// completion is the completion's count, ok when the usage reported one.
func (u *usage) completion() (int64, bool) { return u.n[uCompletion], u.has[uCompletion] }

// parts sets obs's parts of the counts. A part is the provider's word
// on its own count: kept only beside the count it is part of from the
// same usage (hasPrompt, hasCompl: the counts came from it).
func (u *usage) parts(obs *Observation, hasPrompt, hasCompl bool) {
	obs.CachedTokens, obs.HasCached = u.n[uCached], u.has[uCached] && hasPrompt
	obs.CacheWriteTokens, obs.HasCacheWrite = u.n[uCacheWrite], u.has[uCacheWrite] && hasPrompt
	obs.ReasoningTokens, obs.HasReasoning = u.n[uReasoning], u.has[uReasoning] && hasCompl
}

// itlGaps keeps the gaps between chunks carrying text, without a slice:
// a count, a sum and a max (docs/load.md's ITL).
type itlGaps struct {
	chunks   int64
	prev     time.Duration
	sum, max time.Duration
}

// chunk records a text-carrying chunk that arrived at t.
func (g *itlGaps) chunk(t time.Duration) {
	if g.chunks > 0 {
		gap := max(t-g.prev, 0)
		g.sum = admit.AddDuration(g.sum, gap)
		g.max = max(g.max, gap)
	}
	g.chunks++
	g.prev = t
}

// figures are the mean and max gap; ok is false with under two chunks.
func (g *itlGaps) figures() (mean, most time.Duration, ok bool) {
	if g.chunks < 2 {
		return 0, 0, false
	}
	return g.sum / time.Duration(g.chunks-1), g.max, true
}

// readStream feeds SSE events or NDJSON lines to the wire until the
// terminal event, an error event, the end of the body or a read error.
// It returns nil on a clean end.
func (s *httpSeat) readStream(body *countingReader, st *stream) error {
	r := newBodyReader(body, MaxLine)
	defer r.release()
	for !st.done && !st.failed {
		var typ string
		var data []byte
		var ok bool
		if s.w.ndjson() {
			data, ok = r.line()
		} else {
			typ, data, ok = r.event()
		}
		if !ok {
			if st.heldOpen != nil && st.heldOpen() {
				return nil // a complete answer, ended here: see complete
			}
			return r.Err()
		}
		s.w.event(typ, data, st)
		if st.onComplete != nil && st.complete() {
			st.onComplete()
		}
		if st.chunkText {
			// The event carried text: its arrival is a chunk for ITL.
			st.chunkText = false
			st.itl.chunk(body.last)
		}
	}
	return nil
}

var errWholeTooLong = errors.New("json body over the length limit")

// readWhole reads a non-streamed JSON answer, bounded by MaxLine.
func (s *httpSeat) readWhole(body io.Reader, st *stream) error {
	buf, err := io.ReadAll(io.LimitReader(body, MaxLine+1))
	if err != nil {
		return err
	}
	if len(buf) > MaxLine {
		return errWholeTooLong
	}
	s.w.whole(buf, st)
	return nil
}
