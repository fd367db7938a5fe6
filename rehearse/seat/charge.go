package seat

import (
	"context"
	"encoding/json"
	"math"
	"sync/atomic"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// FromEstimate: a cut attempt's count that no usage gave, estimated
// conservatively (never below what was seen), as the failure table
// charges a cut: rehearsal.log's tokens_from=estimate.
const FromEstimate = "estimate"

// newStream is an empty stream counting with codec.
func newStream(codec *lazyCodec) *stream { return &stream{counter: streamCounter{codec: codec}} }

// charge fills the token fields of an attempt whose tokens are charged.
// Each count is the answer's usage where it gave one (field by field,
// see usage); else, for an answer that ended on its own, the tokenizer's
// count (the server's, with tokenizer: server, else the local one) of
// the prompt and of the streamed text; else, for an attempt that was
// cut, an estimate, marked so:
//
//   - the prompt: the tokenizer's count, with the chat template (the
//     server's) or the template's usual cost added (locally: OpenAI's
//     three tokens a message and three for the reply);
//   - a streamed completion: what was seen, and the tokens generated
//     since the last byte at the attempt's own rate (or the seat's),
//     up to the cut; never below what was seen;
//   - a non-streamed completion: its elapsed generation at the seat's
//     last observed rate, at most max_tokens; max_tokens (the worst
//     case) before any rate was observed.
func (s *httpSeat) charge(parent, ctx context.Context, obs *Observation, st *stream, req Request, cut, streamed bool) {
	var counts counter = s.codec
	var tctx context.Context
	if s.tok != nil && !canceledByCaller(parent) {
		var stop context.CancelFunc
		tctx, stop = context.WithTimeout(context.WithoutCancel(parent), serverCountTimeout)
		defer stop()
	}
	if st.counter.stop == nil {
		st.counter.stop = stopCounting(ctx) // only the local tokenizer asks it
	}
	prompt, hasPrompt := st.usage.prompt()
	promptFrom := FromUsage
	if !hasPrompt {
		promptFrom = FromTokenizer
		prompt = -1
		if tctx != nil {
			if n, err := s.tok.countChat(tctx, req); err == nil {
				prompt = n
			}
		}
		if prompt < 0 {
			prompt = countText(counts, []byte(req.Text()), st.counter.stop)
			if cut {
				prompt = admit.AddTokens(prompt, chatOverhead(req))
			}
		}
		if cut {
			promptFrom = FromEstimate
		}
	}
	compl, hasCompl := st.usage.completion()
	complFrom := FromUsage
	if !hasCompl {
		complFrom = FromTokenizer
		compl = -1
		if tctx != nil && len(st.counter.held) > 0 {
			if n, err := s.tok.countText(tctx, st.counter.held); err == nil {
				compl = st.counter.extrapolate(n)
			}
		}
		if compl < 0 {
			compl = st.counter.total()
		}
		if cut {
			complFrom = FromEstimate
			compl = max(compl, s.generated(obs, st, req, compl, streamed))
		}
	}
	obs.PromptTokens, obs.CompletionTokens = prompt, compl
	setSources(obs, promptFrom, complFrom)
	st.usage.parts(obs, hasPrompt, hasCompl)
}

// setSources names each count's source: tokens_from, or mixed with
// both when they differ.
func setSources(obs *Observation, prompt, completion string) {
	obs.TokensFrom, obs.PromptFrom, obs.CompletionFrom = prompt, "", ""
	if prompt != completion {
		obs.TokensFrom, obs.PromptFrom, obs.CompletionFrom = FromMixed, prompt, completion
	}
}

// canceledByCaller says the caller gave up on the attempt (Ctrl-C, a
// proxy's client gone), not a deadline: nobody waits for a count then.
func canceledByCaller(parent context.Context) bool {
	return parent.Err() != nil && parent.Err() != context.DeadlineExceeded
}

// chatOverhead is what a chat template usually adds to a prompt's text:
// OpenAI's rule for its chat models, three tokens a message and three
// that start the reply. Other templates cost more: tokenizer: server
// counts them exactly.
func chatOverhead(req Request) int64 {
	n := max(len(req.Messages), 1)
	return int64(3*n + 3)
}

// generated is a cut attempt's completion as the server generated it,
// beyond what was seen: for a streamed answer, the tokens at the
// attempt's own rate (seen ÷ its generation so far), else the seat's,
// from the first content to the cut; for a non-streamed one, the whole
// elapsed at the seat's rate, at most max_tokens, or max_tokens when no
// rate is known (the worst case).
func (s *httpSeat) generated(obs *Observation, st *stream, req Request, seen int64, streamed bool) int64 {
	limit := int64(maxTokensOf(req, s.cfg.Kind))
	capped := func(n float64) int64 {
		v := admit.ClampTokensFloat(math.Ceil(n))
		if limit > 0 {
			v = min(v, max(limit, seen))
		}
		return v
	}
	if streamed {
		if !obs.HasWait {
			return 0 // nothing generated yet that can be known
		}
		gen := obs.Elapsed - obs.Wait
		if g := st.itl; g.chunks >= 2 && g.prev > obs.Wait && seen > 0 {
			own := float64(seen) / (g.prev - obs.Wait).Seconds()
			return capped(own * gen.Seconds())
		}
		if r, ok := s.rate.get(); ok {
			return capped(r * gen.Seconds())
		}
		return seen
	}
	if r, ok := s.rate.get(); ok {
		return capped(r * obs.Elapsed.Seconds())
	}
	return limit
}

// maxTokensOf is the attempt's max_tokens: the request's, or its
// body's (max_tokens, max_completion_tokens, max_output_tokens,
// options.num_predict); 0 when neither says.
func maxTokensOf(req Request, kind string) int {
	if req.Body == nil || req.MaxTokens > 0 {
		if req.MaxTokens <= 0 && kind == "anthropic" {
			return anthropicDefaultMax // what the seat sends
		}
		return req.MaxTokens
	}
	var b struct {
		MaxTokens     json.RawMessage `json:"max_tokens"`
		MaxCompletion json.RawMessage `json:"max_completion_tokens"`
		MaxOutput     json.RawMessage `json:"max_output_tokens"`
		Options       struct {
			NumPredict json.RawMessage `json:"num_predict"`
		} `json:"options"`
	}
	if json.Unmarshal(req.Body, &b) != nil {
		return 0
	}
	n := int64(0)
	for _, raw := range [...]json.RawMessage{b.MaxTokens, b.MaxCompletion, b.MaxOutput, b.Options.NumPredict} {
		if v, ok := TokenCount(raw); ok {
			n = max(n, v)
		}
	}
	return int(min(n, math.MaxInt32))
}

// streams says whether the attempt asked for a streamed answer: always
// for a body the seat built; a forwarded body's "stream" field (Ollama
// streams unless told not to).
func (s *httpSeat) streams(req Request) bool {
	if req.Body == nil {
		return true
	}
	var b struct {
		Stream *bool `json:"stream"`
	}
	if json.Unmarshal(req.Body, &b) != nil || b.Stream == nil {
		return s.cfg.Kind == "ollama"
	}
	return *b.Stream
}

// seatRate is a seat's last observed generation rate, in tokens a
// second (float64 bits; 0: none yet), shared by its copies.
type seatRate struct{ bits atomic.Uint64 }

// observe takes an ok attempt's rate: its completion over its
// generation (first content to last byte), or over its elapsed when the
// answer came whole at once (a non-streamed answer: slower than the
// truth, as its elapsed holds the prompt's processing).
func (r *seatRate) observe(obs Observation) {
	if r == nil || obs.CompletionTokens < 2 {
		return
	}
	gen := obs.Elapsed - obs.Wait
	if !obs.HasWait || gen < time.Millisecond {
		gen = obs.Elapsed
	}
	if gen < time.Millisecond {
		return
	}
	r.bits.Store(math.Float64bits(float64(obs.CompletionTokens) / gen.Seconds()))
}

func (r *seatRate) get() (float64, bool) {
	if r == nil {
		return 0, false
	}
	v := math.Float64frombits(r.bits.Load())
	return v, v > 0
}
