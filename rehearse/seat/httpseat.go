package seat

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// maxErrorBody bounds how much of a non-2xx body is read for its error
// code; the rest is never read.
const maxErrorBody = 64 << 10

// wire is one HTTP wire format: how to ask, and how to read the answer.
type wire interface {
	path() string // appended to the base URL's path
	header(h http.Header, key string)
	body(model string, req Request) []byte
	ndjson() bool // NDJSON framing instead of SSE
	// event handles one SSE event (typ is its event: name) or one NDJSON
	// line (typ is "").
	event(typ string, data []byte, st *stream)
	// whole handles a non-streamed application/json answer.
	whole(data []byte, st *stream)
	// limits reads the provider's own rate-limit headers (ratelimit.go).
	limits(h http.Header, now func() time.Time) admit.RateLimit
}

// stream is what has been read of one answer so far.
type stream struct {
	counter    streamCounter
	onContent  func()
	content    bool
	prompt     int64
	completion int64
	hasPrompt  bool // prompt tokens came from the answer's usage
	hasCompl   bool // completion tokens came from the answer's usage
	parts      usageParts
	failed     bool // the stream carried an error event
	code       string
	incomplete bool   // the answer ended short and said so (Responses' status incomplete)
	reason     string // incomplete_details.reason: max_output_tokens, content_filter
	done       bool   // the terminal event arrived
	bad        int    // malformed events, tolerated
	chunkText  bool   // the event being read carried text
	itl        itlGaps
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

func (st *stream) usagePrompt(n int64) { st.prompt, st.hasPrompt = n, true }

// usageCompletion replaces, never adds: every format here reports a
// running total (Anthropic's message_delta says so outright).
func (st *stream) usageCompletion(n int64) { st.completion, st.hasCompl = n, true }

// usageParts are the parts of the counts a usage field named
// (Observation.CachedTokens …): each replaces, as the counts do, and is
// kept only when named.
type usageParts struct {
	cached, write, reasoning          int64
	hasCached, hasWrite, hasReasoning bool
}

func (st *stream) usageCached(n int64)     { st.parts.cached, st.parts.hasCached = n, true }
func (st *stream) usageCacheWrite(n int64) { st.parts.write, st.parts.hasWrite = n, true }
func (st *stream) usageReasoning(n int64)  { st.parts.reasoning, st.parts.hasReasoning = n, true }

// httpSeat is an openai, anthropic or ollama seat.
type httpSeat struct {
	cfg Config
	// endpoint is the full endpoint, parsed once and shared by every
	// request (the transport only reads it); it may hold a query string:
	// never print it.
	endpoint *url.URL
	key      string // never print it
	w        wire
	// rt sends each attempt. It is called directly, not through an
	// http.Client: a client would copy every request's headers for the
	// redirects it never follows here (see newTransport).
	rt    http.RoundTripper
	codec *lazyCodec
	now   func() time.Time
	// extra comes from the seat's extra_body:.
	extra map[string]json.RawMessage
	// base is every header but the idempotency key, built once (see
	// newHTTPSeat): requests share its value slices, which nothing writes
	// to. Values from the seat's headers: are secrets like the key: never
	// printed.
	base http.Header
}

// header is a request's header: base, and the attempt's idempotency key
// (a seat's headers: may not set one; see seatHeaders). Without a key
// every request shares base.
func (s *httpSeat) header(idem string) http.Header {
	if idem == "" {
		return s.base
	}
	h := maps.Clone(s.base)
	h["Idempotency-Key"] = []string{idem}
	return h
}

// request is one attempt's POST of payload, built from the parsed
// endpoint (as http.NewRequest builds it, without parsing the URL again)
// in t's own Request and reader. The body stays io.NopCloser over a
// *bytes.Reader: net/http knows that one is in memory and sends the
// headers and body in one write. It is not replayable (no GetBody): the
// transport must never resend it.
func (s *httpSeat) request(ctx context.Context, t *attemptTrace, payload []byte, idem string) *http.Request {
	t.body.Reset(payload)
	t.req = http.Request{
		Method: http.MethodPost, URL: s.endpoint, Host: s.endpoint.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: s.header(idem), Body: io.NopCloser(&t.body), ContentLength: int64(len(payload)),
	}
	if len(payload) == 0 {
		t.req.Body = http.NoBody
	}
	return t.req.WithContext(ctx)
}

func (s *httpSeat) Name() string { return s.cfg.Name }

// String and GoString keep the key and URL out of any %v of a seat.
func (s *httpSeat) String() string   { return fmt.Sprintf("seat %s (%s)", s.cfg.Name, s.cfg.Kind) }
func (s *httpSeat) GoString() string { return s.String() }

// newTransport builds the transport of a seat's attempts: Do calls it
// directly, so each call is exactly one attempt, and a redirect is the
// answer, never followed. No HTTP/2 connection-level retries and no
// proxy from the environment (the seat's timing, not a proxy's).
// Connections are kept alive and reused, as the official SDKs do, unless
// cold. Go's transport replays a request that failed on a reused idle
// connection only when it can rewind the body; requests here have no
// GetBody, so it never does (Do retries itself only when nothing was
// written). Cancelling an attempt closes the connection it was using.
func newTransport(cold bool) *http.Transport {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{}).DialContext,
		DisableKeepAlives:      cold,
		MaxIdleConnsPerHost:    maxIdlePerSeat,
		IdleConnTimeout:        90 * time.Second,
		DisableCompression:     true, // a gzip layer would buffer the stream being timed
		MaxResponseHeaderBytes: 64 << 10,
		Protocols:              protocols,
	}
}

// maxIdlePerSeat is how many idle connections a seat keeps: enough for
// rehearse's highest useful concurrency.
const maxIdlePerSeat = 256

// drainMax and drainGrace bound reading what is left of a body after its
// answer is whole (a chunked stream's terminator after [DONE]), so the
// connection can be reused; a server still sending after that loses its
// connection instead of holding the attempt.
const (
	drainMax   = 4 << 10
	drainGrace = 50 * time.Millisecond
)

// countingReader is the one read path of every answer body: it counts
// bytes, notes when the first and last of them arrived and when the
// body ended (its EOF or error: a server that holds the connection and
// then closes it has taken that long), and marks the answer's first
// byte on the guard when asked to.
type countingReader struct {
	r       io.Reader
	start   time.Time
	n       int64
	first   time.Duration // first body byte; 0: none yet
	last    time.Duration // last body byte
	end     time.Duration // the last Read's return, data or not
	onFirst func()
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	now := time.Since(c.start)
	c.end = now
	if n > 0 {
		if c.n == 0 {
			c.first = max(now, 1)
			if c.onFirst != nil {
				c.onFirst()
			}
		}
		c.n += int64(n)
		c.last = now
	}
	return n, err
}

// attemptTrace is what the transport tells one attempt, from its own
// goroutines: one allocation for all of it. A dial the attempt started
// may report after the attempt is over (it goes on to fill the idle
// pool); it writes here, where nobody reads any more.
type attemptTrace struct {
	start     time.Time
	wrote     atomic.Bool
	reused    atomic.Bool
	firstByte atomic.Int64 // ns since start; 0: not yet
	dialStart atomic.Int64 // ns since start of a new connection's set-up
	dialEnd   atomic.Int64
	trace     httptrace.ClientTrace

	// The rest of the attempt's state that outlives Do's frame, in the
	// same allocation: its request and the request's body (see
	// httpSeat.request), its clocks, and the answer's reader and stream.
	req    http.Request
	body   bytes.Reader
	g      guard
	answer countingReader
	st     stream
	// wait is when the answer's first content arrived (st's onContent).
	wait    time.Duration
	hasWait bool
}

func newAttemptTrace(start time.Time) *attemptTrace {
	t := &attemptTrace{start: start}
	t.trace = httptrace.ClientTrace{
		DNSStart:             func(httptrace.DNSStartInfo) { t.dialStart.CompareAndSwap(0, t.since()) },
		ConnectStart:         func(string, string) { t.dialStart.CompareAndSwap(0, t.since()) },
		GotConn:              t.gotConn,
		WroteRequest:         t.wroteRequest,
		GotFirstResponseByte: func() { t.firstByte.CompareAndSwap(0, t.since()) },
	}
	return t
}

// since is nanoseconds since the attempt began, at least 1 (0 is "not yet").
func (t *attemptTrace) since() int64 { return int64(max(time.Since(t.start), 1)) }

func (t *attemptTrace) gotConn(info httptrace.GotConnInfo) {
	t.reused.Store(info.Reused)
	if !info.Reused {
		t.dialEnd.Store(t.since())
	}
}

func (t *attemptTrace) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err == nil {
		t.wrote.Store(true)
	}
}

// Do makes one attempt. It never returns an error: whatever happened is
// the Observation, whose billing follows from its outcome, whichever
// return sets it.
func (s *httpSeat) Do(parent context.Context, req Request) (obs Observation) {
	start := time.Now()
	obs = Observation{Seat: s.cfg.Name, Model: s.cfg.Model}
	defer func() { obs.Billing = admit.BillingOf(obs.Outcome, obs.Elapsed, req.Slow5xxAfter) }()
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	t := newAttemptTrace(start)
	g := &t.g
	g.init(start, req, cancel)
	defer g.stop()

	payload := req.Body
	if payload == nil {
		payload = mergeBody(s.w.body(s.cfg.Model, req), s.extra)
	}
	tctx := httptrace.WithClientTrace(ctx, &t.trace)
	resp, err := s.rt.RoundTrip(s.request(tctx, t, payload, req.IdempotencyKey))
	if err != nil && t.reused.Load() && ctx.Err() == nil && (!t.wrote.Load() || strings.Contains(err.Error(), "server closed idle connection")) {
		// A kept-alive connection the server had closed while idle: the
		// request never reached a server that would answer it, so a new
		// connection is the same attempt, not a retry. It gets a request
		// of its own: the transport may still hold the first.
		t.reused.Store(false)
		resp, err = s.rt.RoundTrip(s.request(tctx, new(attemptTrace), payload, req.IdempotencyKey))
	}
	if ds, de := t.dialStart.Load(), t.dialEnd.Load(); de > 0 && ds > 0 && de >= ds {
		obs.Connect, obs.HasConnect = time.Duration(de-ds), true
	}
	if err != nil {
		obs.Elapsed = time.Since(start)
		if o, why := cancelled(parent, ctx); o != "" {
			obs.Outcome, obs.Detail = o, why+" before response headers"
			if t.wrote.Load() {
				s.countTokens(ctx, &obs, &stream{counter: streamCounter{codec: s.codec}}, req) // the prompt may have been read
			}
		} else if !t.wrote.Load() {
			obs.Outcome, obs.Detail = admit.ConnError, dialDetail(err)
		} else if t.reused.Load() && t.firstByte.Load() == 0 && closedIdle(err) {
			// A kept-alive connection the server closed as the request
			// went out on it (the close raced the write): nothing came
			// back, and the failure table's class is the connection's.
			obs.Outcome, obs.Detail = admit.ConnError, "kept-alive connection closed by the server before any answer"
		} else {
			obs.Outcome, obs.Detail = admit.ServerError, answerDetail(err)
		}
		return obs
	}
	defer resp.Body.Close()
	// The one deadline for every body, whatever the status: a body the
	// transport has handed off (a 101's connection) or that the server
	// never ends is closed when the attempt's context ends — hard
	// timeout, wait cap or Ctrl-C — so every read below returns.
	unhook := context.AfterFunc(ctx, func() { resp.Body.Close() })
	defer unhook()
	obs.HasTTFB = true
	// ttfb is the first byte of the response, counted only once its
	// headers are whole: a server dribbling headers has not answered.
	obs.TTFB = time.Since(start)
	if fb := t.firstByte.Load(); fb > 0 {
		obs.TTFB = time.Duration(fb)
	}
	obs.HTTPStatus = resp.StatusCode
	obs.RetryAfter, obs.HasRetryAfter = retryAfter(resp.Header, s.now)
	obs.RateLimit = s.w.limits(resp.Header, s.now)
	body := &t.answer
	*body = countingReader{r: resp.Body, start: start}
	// unread ends an answer whose body is not read (the deferred Close
	// closes it on return): a server_error, for detail.
	unread := func(detail string) Observation {
		obs.Elapsed, obs.Outcome, obs.Detail = time.Since(start), admit.ServerError, strings.TrimSpace(detail)
		return obs
	}
	if resp.StatusCode < 200 {
		// A 1xx that ends the exchange (101 Switching Protocols: the
		// connection now speaks something else). Nothing a chat answer
		// can follow: close it now rather than read a foreign protocol.
		return unread(fmt.Sprintf("http %d: a protocol switch nobody asked for", resp.StatusCode))
	}
	if ce := strings.TrimSpace(resp.Header.Get("Content-Encoding")); ce != "" && !strings.EqualFold(ce, "identity") {
		// No encoding was asked for (no Accept-Encoding is sent): an
		// encoded body is unreadable here, and decoding it could be a bomb.
		return unread(fmt.Sprintf("http %d with content-encoding %s, not asked for", resp.StatusCode, s.clean(strings.ToLower(ce))))
	}
	if resp.StatusCode > 299 {
		s.errorResponse(parent, ctx, g, &obs, resp, body)
		s.release(ctx, g, resp)
		return obs
	}

	st := &t.st
	*st = stream{counter: streamCounter{codec: s.codec}}
	st.onContent = func() {
		if g.answer() {
			t.wait, t.hasWait = body.last, true
			if req.OnContent != nil {
				req.OnContent()
			}
		}
	}
	var readErr error
	switch mt := mediaType(resp.Header.Get("Content-Type")); {
	case mt == "application/json" && !s.w.ndjson():
		readErr = s.readWhole(body, st)
	case streamType(mt, s.w.ndjson()):
		readErr = s.readStream(body, st)
	default:
		return unread("unexpected content type " + s.clean(mt))
	}
	obs.Wait, obs.HasWait = t.wait, t.hasWait
	obs.Bytes = body.n
	obs.Elapsed = max(body.end, obs.TTFB)
	obs.ITLMean, obs.ITLMax, obs.HasITL = st.itl.figures()

	switch o, why := cancelled(parent, ctx); {
	case readErr != nil && o != "":
		obs.Elapsed = time.Since(start)
		obs.Outcome, obs.Detail = o, why
		if obs.HasWait {
			obs.Detail = why + " mid-stream"
		}
	case readErr == bufio.ErrTooLong:
		obs.Outcome, obs.Detail = admit.ServerError, fmt.Sprintf("stream line over %d KiB", MaxLine>>10)
	case readErr == errWholeTooLong:
		obs.Outcome, obs.Detail = admit.ServerError, fmt.Sprintf("json body over %d KiB", MaxLine>>10)
	case readErr != nil && malformedBody(readErr):
		obs.Elapsed = time.Since(start)
		obs.Outcome, obs.Detail = admit.ServerError, "malformed response body"
	case readErr != nil:
		obs.Elapsed = time.Since(start)
		obs.Outcome, obs.Detail = admit.Reset, "connection lost mid-stream"
	case st.failed:
		obs.ErrorCode = s.clean(st.code)
		obs.Outcome = admit.ServerError // an error event without a code
		if obs.ErrorCode != "" {
			obs.Outcome = admit.ClassifyHTTP(http.StatusOK, obs.ErrorCode)
		}
		obs.Detail = strings.TrimSpace("error event " + obs.ErrorCode)
		if !obs.HasWait && g.answer() {
			// The error is the answer, as for an error status.
			obs.Wait, obs.HasWait = obs.Elapsed, true
		}
	case st.incomplete:
		obs.ErrorCode = s.clean(st.reason)
		obs.Outcome = admit.Incomplete
		obs.Detail = strings.TrimSpace("incomplete " + obs.ErrorCode)
		if !obs.HasWait && g.answer() {
			obs.Wait, obs.HasWait = obs.Elapsed, true // an empty answer is the answer
		}
	case st.content || st.hasCompl || st.done:
		obs.Outcome = admit.OK
	default:
		obs.Outcome = admit.ServerError
		obs.Detail = "stream ended without content"
		if st.bad > 0 {
			obs.Detail = fmt.Sprintf("stream ended without content (%d malformed events)", st.bad)
		}
	}
	switch obs.Outcome {
	case admit.OK, admit.Incomplete, admit.Reset, admit.Timeout, admit.WaitCap, admit.Cancelled:
		s.countTokens(ctx, &obs, st, req)
	default:
		if st.content {
			s.countTokens(ctx, &obs, st, req) // output that was generated before the error
		}
	}
	s.release(ctx, g, resp)
	return obs
}

// release hands a finished answer's connection back for reuse: what is
// left of its body is drained after the timed window, bounded in bytes
// and time (on the attempt's guard, whose timer is already there). A
// cold seat, or an attempt that was cancelled, closes it instead.
func (s *httpSeat) release(ctx context.Context, g *guard, resp *http.Response) {
	if s.cfg.Cold || ctx.Err() != nil {
		return
	}
	g.closeAfter(drainGrace, resp.Body)
	_, _ = io.CopyN(io.Discard, resp.Body, drainMax)
	g.closeDone()
}

// errorResponse reads a non-2xx answer: its status and, from a bounded
// prefix of its body, the provider's error code.
func (s *httpSeat) errorResponse(parent, ctx context.Context, g *guard, obs *Observation, resp *http.Response, body *countingReader) {
	// The error body is the answer: its first byte (or its end, when it
	// is empty) is what the wait cap waits for, not the bare headers.
	body.onFirst = func() { g.answer() }
	buf, err := io.ReadAll(io.LimitReader(body, maxErrorBody))
	obs.Bytes = body.n
	obs.Elapsed = max(body.end, obs.TTFB)
	if o, why := cancelled(parent, ctx); err != nil && o != "" {
		obs.Elapsed = time.Since(body.start)
		obs.Outcome, obs.Detail = o, fmt.Sprintf("%s reading an http %d body", why, resp.StatusCode)
		if body.n > 0 {
			obs.Wait, obs.HasWait = body.first, true
		}
		return
	}
	if err == nil && !g.answer() {
		// An empty error body ended after the wait cap fired: the cap won.
		obs.Outcome, obs.Detail = admit.WaitCap, "no content within the wait cap"
		return
	}
	if err != nil {
		// The body broke off: the status still classifies the answer.
		obs.Detail = "error body cut short: "
		if malformedBody(err) {
			obs.Detail = "malformed error body: "
		}
	}
	obs.ErrorCode = s.clean(errorCode(buf))
	obs.Outcome = admit.ClassifyHTTP(resp.StatusCode, obs.ErrorCode)
	obs.Detail = strings.TrimSpace(fmt.Sprintf("%shttp %d %s", obs.Detail, resp.StatusCode, obs.ErrorCode))
	// The error body is the first byte of the answer (as in Resolve).
	obs.Wait, obs.HasWait = obs.Elapsed, true
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
			return r.Err()
		}
		s.w.event(typ, data, st)
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

// malformedBody says a body read failed on the server's framing (a bad
// or over-long chunk-size line), not on the connection.
func malformedBody(err error) bool {
	if errors.Is(err, httputil.ErrLineTooLong) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "chunk") || strings.Contains(msg, "malformed")
}

// countTokens fills the token fields: the answer's usage where it gave
// one, else the local tokenizer over the prompt and the streamed text.
// Tokenizer counts see the prompt's text only, not the chat template a
// server wraps it in, so they run a few tokens low; after a cancellation,
// text the countGrace did not reach is estimated at four bytes a token.
func (s *httpSeat) countTokens(ctx context.Context, obs *Observation, st *stream, req Request) {
	if st.counter.stop == nil && (!st.hasPrompt || !st.hasCompl) {
		st.counter.stop = stopCounting(ctx) // only the tokenizer asks it
	}
	fillTokens(obs, st, s.codec, req.Text())
}

func fillTokens(obs *Observation, st *stream, codec *lazyCodec, prompt string) {
	obs.PromptTokens, obs.CompletionTokens = st.prompt, st.completion
	obs.PromptFrom, obs.CompletionFrom = FromUsage, FromUsage
	if !st.hasPrompt {
		obs.PromptTokens, obs.PromptFrom = countText(codec, []byte(prompt), st.counter.stop), FromTokenizer
	}
	if !st.hasCompl {
		obs.CompletionTokens, obs.CompletionFrom = st.counter.total(), FromTokenizer
	}
	// A part is the provider's word on its own count: kept only beside
	// the count it is part of from the same usage.
	p := st.parts
	obs.CachedTokens, obs.HasCached = p.cached, p.hasCached && st.hasPrompt
	obs.CacheWriteTokens, obs.HasCacheWrite = p.write, p.hasWrite && st.hasPrompt
	obs.ReasoningTokens, obs.HasReasoning = p.reasoning, p.hasReasoning && st.hasCompl
	obs.TokensFrom = obs.PromptFrom
	if obs.PromptFrom != obs.CompletionFrom {
		obs.TokensFrom = FromMixed
	} else {
		obs.PromptFrom, obs.CompletionFrom = "", ""
	}
}

// mediaType is a Content-Type's media type, lower-cased, without its
// parameters: what mime.ParseMediaType returns for it, or for a malformed
// one the same words, without parsing parameters nobody reads.
func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// streamType says whether a 200's content type is read as a stream. A
// missing or text/plain type is read anyway (some compatible servers
// send those); anything else (an HTML page from a proxy, say) is a
// server_error without reading the body.
func streamType(mt string, ndjson bool) bool {
	switch mt {
	case "", "text/plain":
		return true
	case "text/event-stream":
		return !ndjson
	case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/json":
		return ndjson
	}
	return false
}

// clean admits a server-supplied word (an error code, a content type)
// into the observation only if it looks like one: short, plain
// characters, and holding no part of the seat's key even when the server
// echoes it back.
func (s *httpSeat) clean(v string) string {
	if v == "" || len(v) > 64 {
		return ""
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:/+", r)) {
			return ""
		}
	}
	// Case-insensitive: media types come back lower-cased, and a proxy
	// may upper-case an echoed key.
	if lk, lv := strings.ToLower(s.key), strings.ToLower(v); s.key != "" && (strings.Contains(lv, lk) || len(v) >= 8 && strings.Contains(lk, lv)) {
		return ""
	}
	return v
}

// errorCode finds the provider's error code in an error body or event:
// {"error":{"code":"…","type":"…"}} (OpenAI: code, else type) or
// {"type":"error","error":{"type":"…"}} (Anthropic). A string error
// (Ollama) or anything else has no code.
func errorCode(body []byte) string {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '[' {
		// Google's APIs (Gemini's OpenAI-compatible endpoint among them)
		// may wrap the error object in a one-element list.
		var list []json.RawMessage
		if json.Unmarshal(b, &list) != nil || len(list) != 1 {
			return ""
		}
		body = list[0]
	}
	if json.Unmarshal(body, &v) != nil || len(v.Error) == 0 || v.Error[0] != '{' {
		return ""
	}
	var e struct {
		Code    json.RawMessage `json:"code"`
		Type    json.RawMessage `json:"type"`
		Status  json.RawMessage `json:"status"` // Google's: RESOURCE_EXHAUSTED
		Details []struct {
			Type       string `json:"@type"`
			Violations []struct {
				QuotaID string `json:"quotaId"`
			} `json:"violations"`
		} `json:"details"`
	}
	if json.Unmarshal(v.Error, &e) != nil {
		return ""
	}
	// A Google quota failure on a daily quota names it: its id (e.g.
	// GenerateRequestsPerDayPerProjectPerModel-FreeTier) is the code, a
	// permanent one (admit.ClassifyHTTP), since no retry within a job
	// outlasts a day.
	for _, d := range e.Details {
		if strings.HasSuffix(d.Type, "google.rpc.QuotaFailure") {
			for _, q := range d.Violations {
				if admit.DailyQuota(q.QuotaID) {
					return q.QuotaID
				}
			}
		}
	}
	for _, raw := range []json.RawMessage{e.Code, e.Type, e.Status} {
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

// retryAfter reads retry-after-ms (OpenAI's, in milliseconds) or else
// Retry-After, in seconds or as an HTTP date; a date is measured from the
// response's Date header, or from now() when it has none. Every value is
// clamped into [0, admit.MaxDuration] (a wait past any deadline stays a
// refusal, and the log can always read it back); a negative or garbage
// value is no Retry-After at all.
func retryAfter(h http.Header, now func() time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if f, ok := headerNumber(v); ok {
			return admit.SecondsDuration(f / 1000), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if f, ok := headerNumber(v); ok {
		return admit.SecondsDuration(f), true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	// Sub saturates at the int64 range: a year-9999 date clamps, not wraps.
	return admit.ClampDuration(at.Sub(responseDate(h, now))), true
}

// responseDate is the instant a response's times are measured from: its
// Date header, or now() when it has none.
func responseDate(h http.Header, now func() time.Time) time.Time {
	if d, err := http.ParseTime(h.Get("Date")); err == nil {
		return d
	}
	return now()
}

// headerNumber reads a non-negative number of a header; ±Inf from a range
// error (1e400) counts, NaN and negatives do not.
func headerNumber(v string) (float64, bool) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil && !math.IsInf(f, 1) || math.IsNaN(f) || f < 0 {
		return 0, false
	}
	return f, true
}

// closedIdle says a request's error is its connection's end (EOF, a
// reset, a broken pipe), not an answer the server began.
func closedIdle(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// answerDetail names a failure after the request was sent and before
// the response headers were whole, without quoting the error.
func answerDetail(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "response headers exceeded"):
		return "response headers over 64 KiB"
	case strings.Contains(msg, "1xx"):
		return "too many 1xx responses"
	case strings.Contains(msg, "malformed HTTP"):
		return "malformed response"
	}
	return "connection closed before response headers"
}

// dialDetail names a connection failure without quoting the error, whose
// text carries the URL (and so any query string).
func dialDetail(err error) string {
	var dns *net.DNSError
	var certErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	var alert tls.AlertError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.As(err, &dns):
		return "dns lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &certErr), errors.As(err, &recErr), errors.As(err, &alert),
		errors.As(err, &unknownCA), errors.As(err, &hostErr), strings.Contains(err.Error(), "tls: "):
		return "tls handshake failed"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset before the request was sent"
	}
	return "connection failed"
}
