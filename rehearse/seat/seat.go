// Package seat times one attempt against one seat — an HTTP model
// endpoint, a local command, or a plan on the virtual clock — and says
// exactly what happened: ttfb, wait, elapsed, tokens, outcome class.
package seat

import (
	"context"
	"math/bits"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// Request is one attempt's input. The attempt's hard timeout is the
// context's deadline; the seat must cancel the request for real when it
// fires (close the connection, kill the process), not merely stop reading.
type Request struct {
	Prompt         string
	Messages       []Message // when set, sent as the chat in place of Prompt
	MaxTokens      int
	IdempotencyKey string        // the job id: the logical request (seed 001)
	WaitCap        time.Duration // 0: none. No first content by then → cancel, outcome wait_cap
	// SoftTimeout: OnSoft is called once when it passes with no answer
	// begun (no content, no error body). 0: none.
	SoftTimeout time.Duration
	OnSoft      func(elapsed time.Duration)
	// Stall is the stall window (the policy's timeouts.stall): once the
	// answer began, no byte for this long cuts the attempt, outcome
	// reset (a stream that stopped mid-answer is a lost one, billable
	// for what it sent, as a dropped connection is). 0: none.
	Stall time.Duration
	// Slow5xxAfter is the policy's retry.slow_5xx_after: a 5xx that took
	// at least this long is billed ambiguous, not free (admit.BillingOf).
	// 0 treats every 5xx as fast.
	Slow5xxAfter time.Duration
	// OnContent, when set, is called once, on the goroutine reading the
	// answer, when its first content arrives within the wait cap (the
	// moment Observation.Wait measures): a proxy commits a stream to its
	// client there, and not before (HTTP seats).
	OnContent func()
	// Body, when set, is an HTTP seat's request body as it is (a proxy
	// forwarding its client's own), sent in place of one built from
	// Prompt, Messages and MaxTokens, which then build nothing; Prompt
	// still counts the prompt's tokens when the answer has no usage.
	Body []byte
}

// Token sources, as written to rehearsal.log's tokens_from.
const (
	FromUsage     = "usage"
	FromTokenizer = "tokenizer"
	FromScript    = "script"
	FromHand      = "hand"
	// FromMixed: the counts came from different sources (PromptFrom,
	// CompletionFrom say which).
	FromMixed = "mixed"
)

// Observation is what one attempt did. Durations are measured from submit
// on the monotonic clock (or the virtual one).
type Observation struct {
	Seat  string
	Model string

	TTFB    time.Duration // submit → response headers
	Wait    time.Duration // submit → first chunk carrying content or reasoning text
	Elapsed time.Duration // submit → last byte (or cancellation)
	HasTTFB bool
	HasWait bool // false when no content ever arrived
	// Connect is the new connection's set-up (DNS, TCP and TLS) inside
	// the attempt; HasConnect is false when a kept-alive connection was
	// reused (or none was made).
	Connect    time.Duration
	HasConnect bool
	// ITLMean and ITLMax summarise the gaps between consecutive chunks
	// carrying content or reasoning text, whatever their token count
	// (docs/load.md); HasITL is false with fewer than two such chunks.
	ITLMean, ITLMax time.Duration
	HasITL          bool

	PromptTokens     int64
	CompletionTokens int64
	TokensFrom       string
	// PromptFrom and CompletionFrom are each count's own source when they
	// differ (the prompt from usage, the completion counted locally after
	// a cut stream): the log writes tokens_from=mixed and both keys.
	PromptFrom, CompletionFrom string
	// CachedTokens, CacheWriteTokens and ReasoningTokens are the parts of
	// the counts the provider reported (docs/log.md maps each API's
	// fields): input read from and written to the prompt cache, both
	// inside PromptTokens, and reasoning inside CompletionTokens. A Has
	// field is false when the provider did not report the part, and the
	// log then leaves its key out; a reported 0 is a fact (a retry that
	// read its whole prompt from the cache wrote none of it).
	CachedTokens, CacheWriteTokens, ReasoningTokens int64
	HasCached, HasCacheWrite, HasReasoning          bool

	HTTPStatus    int
	RetryAfter    time.Duration
	HasRetryAfter bool
	// RateLimit is the provider's rate-limit state on the answer, from
	// its headers, normalised (admit.RateLimit).
	RateLimit admit.RateLimit
	ErrorCode string // provider's error code/type, e.g. context_length_exceeded
	Bytes     int64  // response bytes received

	Outcome admit.Outcome
	Billing admit.Billing
	// Detail is a short, secret-free description of a failure for the log's note.
	Detail string
}

// LoggedWait is the wait rehearsal.log records for the attempt: its
// first byte's, or, when a timeout, the wait cap or a cancellation cut it
// off before one, its elapsed (the wait was at least that long). ok is
// false when the attempt says nothing about its wait (it failed before
// any answer). time --json and the log both use it.
func (o *Observation) LoggedWait() (d time.Duration, ok bool) {
	if !o.HasWait && (o.Outcome == admit.Timeout || o.Outcome == admit.WaitCap || o.Outcome == admit.Cancelled) {
		return o.Elapsed, true
	}
	return o.Wait, o.HasWait
}

// Tokens is prompt + completion, saturating at admit.MaxTokens.
func (o *Observation) Tokens() int64 { return admit.AddTokens(o.PromptTokens, o.CompletionTokens) }

// Seat is where a scratch call goes.
type Seat interface {
	Name() string
	Do(ctx context.Context, req Request) Observation
}

// DoWithin makes one attempt of s under a hard timeout: s.Do with a
// context whose deadline is hard from now.
func DoWithin(ctx context.Context, s Seat, req Request, hard time.Duration) Observation {
	actx, cancel := context.WithTimeout(ctx, hard)
	defer cancel()
	return s.Do(actx, req)
}

// Plan is what a scripted or modelled seat would do on one attempt if the
// client waited forever. Resolve turns it into an Observation under an
// attempt's timeouts; `seat serve` plays it over real HTTP.
type Plan struct {
	TTFB             time.Duration // headers; 0 means with the first byte
	Wait             time.Duration // first content chunk
	Elapsed          time.Duration // last byte
	Hang             bool          // never returns (headers may still come at TTFB)
	ResetAfter       time.Duration // >0: connection dropped at this point mid-stream
	Status           int           // HTTP status; 0 means 200
	RetryAfter       time.Duration
	HasRetryAfter    bool
	RateLimit        admit.RateLimit // the response's rate-limit headers
	ErrorCode        string
	PromptTokens     int64
	CompletionTokens int64
	// The usage's parts (Observation's), each reported when its Has is set.
	CachedTokens, CacheWriteTokens, ReasoningTokens int64
	HasCached, HasCacheWrite, HasReasoning          bool
	NoUsage                                         bool // the response carries no usage field
	ConnError                                       bool // the connection is refused outright
	// Incomplete, when set, is why a 200 answer that streamed to its end
	// ended short (max_output_tokens, content_filter): the outcome
	// incomplete, as the Responses API's status incomplete.
	Incomplete string
}

// promptParts copies the plan's parts of the prompt count onto o.
func (p *Plan) promptParts(o *Observation) {
	o.CachedTokens, o.HasCached = p.CachedTokens, p.HasCached
	o.CacheWriteTokens, o.HasCacheWrite = p.CacheWriteTokens, p.HasCacheWrite
}

// Resolve is the virtual-time stopwatch: what a client with the given
// hard timeout, wait cap and slow-5xx threshold would observe of plan.
// hard <= 0 and waitCap <= 0 mean none. Its outcome and billing follow
// the rule Do's classify follows (ending.settle).
func Resolve(p Plan, hard, waitCap, slowAfter time.Duration) Observation {
	var o Observation
	ResolveTo(&o, &p, hard, waitCap, slowAfter)
	return o
}

// ResolveTo is Resolve into *o, with the plan read through p: the
// simulator's per-attempt path, which copies neither.
func ResolveTo(o *Observation, p *Plan, hard, waitCap, slowAfter time.Duration) {
	*o = Observation{}
	o.TokensFrom, o.PromptTokens = FromScript, p.PromptTokens
	p.promptParts(o) // they go with the prompt count, kept or cleared with it
	status := p.Status
	if status == 0 {
		status = 200
	}
	if p.ConnError {
		o.Outcome, o.Billing = admit.ConnError, admit.Free
		o.Detail = "connection refused"
		return
	}
	ttfb := p.TTFB
	if ttfb <= 0 || (p.Wait > 0 && ttfb > p.Wait) {
		ttfb = p.Wait
	}
	if status != 200 {
		// An error response: headers and body arrive together at Elapsed.
		ttfb = p.Elapsed
	}
	end := p.Elapsed
	// A plan streams to its end, or ends in an error status or event.
	e := ending{whole: true, incomplete: p.Incomplete != "", status: status, code: p.ErrorCode,
		errored: status != 200 || p.ErrorCode != ""}
	hung := p.Hang
	// A reset at the last byte's moment still drops the connection: the
	// client never sees the stream's end.
	if p.ResetAfter > 0 && (hung || p.ResetAfter <= end) {
		end, e.cut, hung = p.ResetAfter, admit.Reset, false
	}
	// Which limit fires first: wait cap (no content yet), hard timeout, or the end.
	contentAt := p.Wait
	hasContent := !e.errored && (hung || contentAt <= end)
	type limit struct {
		at      time.Duration
		outcome admit.Outcome
	}
	var cut *limit
	if waitCap > 0 {
		firstByte := contentAt
		if !hasContent {
			firstByte = end // an error body is the first byte
			if hung {
				firstByte = 1<<63 - 1
			}
		}
		if firstByte > waitCap {
			cut = &limit{waitCap, admit.WaitCap}
		}
	}
	if hard > 0 && (hung || end > hard) && (cut == nil || hard < cut.at) {
		cut = &limit{hard, admit.Timeout}
	}
	if cut == nil && hung {
		// No limit at all and a seat that never answers: the caller must set one.
		cut = &limit{1<<63 - 1, admit.Timeout}
	}
	if cut != nil {
		o.Elapsed = cut.at
		e.cut = cut.outcome
		if ttfb <= cut.at && status == 200 {
			o.TTFB, o.HasTTFB = ttfb, true
		}
		if hasContent && contentAt <= cut.at {
			o.Wait, o.HasWait = contentAt, true
			// Partial output: tokens produced so far, pro rata.
			o.CompletionTokens = partialTokens(p, cut.at)
			o.ITLMean, o.ITLMax, o.HasITL = planITL(p, cut.at)
		}
		o.Outcome, o.Billing, _ = e.settle(o.Elapsed, slowAfter)
		o.HTTPStatus = 0
		if o.HasTTFB {
			o.HTTPStatus = status
		}
		return
	}
	o.Elapsed = end
	o.TTFB, o.HasTTFB = ttfb, true
	o.HTTPStatus = status
	o.ErrorCode = p.ErrorCode
	o.RetryAfter, o.HasRetryAfter = p.RetryAfter, p.HasRetryAfter
	o.RateLimit = p.RateLimit
	var charged bool
	o.Outcome, o.Billing, charged = e.settle(o.Elapsed, slowAfter)
	if o.Outcome == admit.Incomplete {
		o.ErrorCode = p.Incomplete
	}
	switch {
	case !charged:
		o.Wait, o.HasWait = end, true // the error body is the first byte
		o.PromptTokens = 0
		(&Plan{}).promptParts(o)
	case e.cut == admit.Reset:
		if hasContent && contentAt <= end {
			o.Wait, o.HasWait = contentAt, true
			o.CompletionTokens = partialTokens(p, end)
			o.ITLMean, o.ITLMax, o.HasITL = planITL(p, end)
		}
		if ttfb > end {
			// Dropped before the headers: no status, code or Retry-After was seen.
			o.TTFB, o.HasTTFB, o.HTTPStatus = 0, false, 0
			o.ErrorCode, o.RetryAfter, o.HasRetryAfter = "", 0, false
			o.RateLimit = admit.RateLimit{}
		}
	default:
		o.Wait, o.HasWait = contentAt, true
		o.CompletionTokens = p.CompletionTokens
		o.ReasoningTokens, o.HasReasoning = p.ReasoningTokens, p.HasReasoning
		o.ITLMean, o.ITLMax, o.HasITL = planITL(p, end)
	}
}

// planITL is the ITL a plan implies for a stream read until at: one
// token a chunk, the first at the wait and the last at the plan's elapsed,
// evenly spread, so every gap is (elapsed − wait) ÷ (completion tokens − 1).
// ok is false until two chunks have come.
func planITL(p *Plan, at time.Duration) (mean, most time.Duration, ok bool) {
	if p.CompletionTokens < 2 || p.Elapsed <= p.Wait || at <= p.Wait {
		return 0, 0, false
	}
	gap := (p.Elapsed - p.Wait) / time.Duration(p.CompletionTokens-1)
	if at < p.Elapsed && (gap <= 0 || at-p.Wait < gap) {
		return 0, 0, false
	}
	return gap, gap, true
}

// partialTokens is the completion tokens p has streamed by at: pro rata
// from the first content to the plan's last byte, never more than all of
// them. The 128-bit product cannot overflow.
func partialTokens(p *Plan, at time.Duration) int64 {
	if p.CompletionTokens <= 0 || p.Elapsed <= p.Wait || at <= p.Wait {
		return 0
	}
	if at >= p.Elapsed {
		return p.CompletionTokens
	}
	hi, lo := bits.Mul64(uint64(p.CompletionTokens), uint64(at-p.Wait))
	q, _ := bits.Div64(hi, lo, uint64(p.Elapsed-p.Wait)) // q < CompletionTokens: no overflow panic
	return int64(q)
}

// Planner yields, deterministically, what a scripted or modelled seat does
// on its n-th call (0-based, counted across every job that uses the seat).
type Planner interface {
	PlanFor(n int) Plan
}

// LoadPlanner is a Planner whose calls slow with load (simulate's slots=
// term): the virtual driver passes how many calls are in flight on the
// seat at the call's submit, this one included. The real-time
// counterpart is `seat serve --slots`, whose queue slows real calls.
type LoadPlanner interface {
	Planner
	PlanLoadedTo(p *Plan, n, busy int) // into *p: the driver reuses one
}

// Config is one entry of the policy file's `seats:` map.
type Config struct {
	Name      string   // the map key
	Kind      string   // openai | anthropic | ollama | exec | script
	BaseURL   string   // http kinds: e.g. http://127.0.0.1:6556/v1
	Model     string   // model name sent to the seat (and written to the log)
	APIKeyEnv string   // name of the env var holding the key; never the key itself
	Command   []string // exec: argv
	Script    string   // script: path to the YAML script
	Encoding  string   // tokenizer encoding override (e.g. cl100k_base, o200k_base)
	// Tokenizer is what counts an answer that has no usage: "" or
	// "local", the local encoding; "server", the server's own /tokenize
	// (llama.cpp's llama-server, vLLM), chat template included, with the
	// local encoding when the server does not answer (CheckTokenizer).
	Tokenizer string
	PriceIn   float64 // USD per 1M prompt tokens (0: unknown)
	PriceOut  float64 // USD per 1M completion tokens (0: unknown)
	// PriceCachedIn and PriceCacheWrite are USD per 1M input tokens read
	// from and written to the provider's prompt cache; nil: PriceIn.
	PriceCachedIn, PriceCacheWrite *float64
	// MaxTokensParam (openai) names the request field that carries
	// Request.MaxTokens: max_tokens or max_completion_tokens. "" picks by
	// model: max_completion_tokens for OpenAI reasoning models (o1, o3,
	// o4, gpt-5), which refuse max_tokens; max_tokens otherwise, which
	// every compatible server honours.
	MaxTokensParam string
	// ContextWindow is the seat's context window in tokens (0: not
	// declared): a context-length error goes on to the next seat of the
	// chain with a larger one, once.
	ContextWindow int64
	// Prefill says the seat accepts an assistant prefill (a trailing
	// assistant message it continues): Anthropic does; an
	// OpenAI-compatible server such as vLLM or llama.cpp may.
	Prefill bool
	// API (openai) is the endpoint an openai seat speaks: "" or "chat",
	// Chat Completions (POST {base_url}/chat/completions); "responses",
	// the Responses API (POST {base_url}/responses), with the same base
	// URL, key, headers and error bodies.
	API string
	// Cold makes every attempt open a new connection (and close it after),
	// so each attempt pays the connect a first caller would. By default
	// connections are kept alive and reused, as the official SDKs do.
	Cold bool
	// Headers are extra request headers (http kinds): header name → the
	// name of the environment variable holding its value. Values are read
	// once, at construction, and never written anywhere: an Azure api-key,
	// an organization or project header.
	Headers map[string]string
	// ExtraBody fields are merged into the request body's top level
	// (temperature, seed, reasoning_effort, …); they may replace a field
	// the seat sets, except the ones that make the attempt what it is.
	ExtraBody map[string]any
}

// Prices is the seat's rate card, each cache price PriceIn when unset.
func (c Config) Prices() admit.Prices {
	p := admit.Prices{In: c.PriceIn, Out: c.PriceOut, CachedIn: c.PriceIn, CacheWrite: c.PriceIn}
	if c.PriceCachedIn != nil {
		p.CachedIn = *c.PriceCachedIn
	}
	if c.PriceCacheWrite != nil {
		p.CacheWrite = *c.PriceCacheWrite
	}
	return p
}

// Priced reports whether the seat has prices.
func (c Config) Priced() bool {
	p := c.Prices()
	return p.In != 0 || p.Out != 0 || p.CachedIn != 0 || p.CacheWrite != 0
}

// Cost estimates an attempt's cost from the seat's prices (admit.Cost);
// ok is false when the seat has no prices.
func (c Config) Cost(u admit.Usage) (usd float64, ok bool) {
	if !c.Priced() {
		return 0, false
	}
	return admit.Cost(c.Prices(), u), true
}

// UncachedCost is what u would cost with every input token at PriceIn:
// the attempt without cache pricing, beside its cost, so the USD the
// cache saved (or, rewritten, cost) can be summed from the log.
func (c Config) UncachedCost(u admit.Usage) float64 {
	p := c.Prices()
	p.CachedIn, p.CacheWrite = p.In, p.In
	return admit.Cost(p, admit.Usage{Prompt: u.Prompt, Completion: u.Completion})
}

// Usage is the observation's tokens as the cost function reads them.
func (o *Observation) Usage() admit.Usage {
	u := admit.Usage{Prompt: o.PromptTokens, Completion: o.CompletionTokens}
	if o.HasCached {
		u.Cached = o.CachedTokens
	}
	if o.HasCacheWrite {
		u.CacheWrite = o.CacheWriteTokens
	}
	return u
}
