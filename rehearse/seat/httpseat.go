package seat

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
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

// httpSeat is an openai, anthropic or ollama seat. Do's rooms: the
// transport and its clocks (transport.go, guard.go), the stream read so
// far (stream.go and each wire's reader), the outcome (classify.go) and
// the tokens charged (charge.go).
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
	// rate is the seat's observed generation rate, shared by its copies
	// (WithTransport): a cut non-streamed attempt is charged at it.
	rate *seatRate
	// tok is the server's tokenizer (tokenizer: server), nil for the
	// local one.
	tok *serverTokenizer
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

func (s *httpSeat) Name() string { return s.cfg.Name }

// String and GoString keep the key and URL out of any %v of a seat.
func (s *httpSeat) String() string   { return fmt.Sprintf("seat %s (%s)", s.cfg.Name, s.cfg.Kind) }
func (s *httpSeat) GoString() string { return s.String() }

// Do makes one attempt. It never returns an error: whatever happened is
// the Observation.
func (s *httpSeat) Do(parent context.Context, req Request) (obs Observation) {
	start := time.Now()
	obs = Observation{Seat: s.cfg.Name, Model: s.cfg.Model}
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	t := newAttemptTrace(start)
	g := &t.g
	g.init(start, ctx, req, cancel)
	defer g.stop()

	payload := req.Body
	if payload == nil {
		payload = mergeBody(s.w.body(s.cfg.Model, req), s.extra)
	}
	// The request's own context, below the attempt's: ending it ends a
	// complete answer whose server holds the connection open (tailCut),
	// which is no cut of the attempt.
	rctx, endReq := context.WithCancelCause(ctx)
	defer endReq(nil)
	t.tail.end = endReq
	tctx := httptrace.WithClientTrace(rctx, &t.trace)
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
		idle := t.reused.Load() && t.firstByte.Load() == 0 // a kept-alive connection that gave nothing back
		if s.noAnswer(parent, ctx, g, &obs, t.wrote.Load(), idle, err, req.Slow5xxAfter) {
			s.charge(parent, ctx, &obs, newStream(s.codec), req, true, s.streams(req)) // the prompt may have been read
		}
		return obs
	}
	defer resp.Body.Close()
	// The one deadline for every body, whatever the status: a body the
	// transport has handed off (a 101's connection) or that the server
	// never ends is closed by the attempt's cut — hard timeout, wait
	// cap, stall or Ctrl-C — so every read below returns.
	if !g.hold(resp.Body) {
		resp.Body.Close()
	}
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
	*body = countingReader{r: resp.Body, start: start, g: g}
	// unread ends an answer whose body is not read (the deferred Close
	// closes it on return): a server_error, for detail.
	unread := func(detail string) Observation {
		obs.Elapsed, obs.Outcome, obs.Detail = time.Since(start), admit.ServerError, strings.TrimSpace(detail)
		obs.Billing = admit.BillingOf(obs.Outcome, obs.Elapsed, req.Slow5xxAfter)
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
		s.errorResponse(parent, ctx, g, &obs, resp, body, req.Slow5xxAfter)
		s.release(ctx, g, resp)
		return obs
	}

	st := &t.st
	*st = stream{counter: streamCounter{codec: s.codec}, heldOpen: t.tail.fired.Load}
	st.onComplete = func() { g.closeAfter(TailGrace, &t.tail) } // from its last event
	st.onContent = func() {
		if g.answer() {
			t.wait, t.hasWait = body.last, true
			if req.OnContent != nil {
				req.OnContent()
			}
		}
	}
	var readErr error
	streamed := true
	switch mt := mediaType(resp.Header.Get("Content-Type")); {
	case mt == "application/json" && !s.w.ndjson():
		streamed = false
		readErr = s.readWhole(body, st)
	case streamType(mt, s.w.ndjson()):
		readErr = s.readStream(body, st)
		g.closeDone()
		if t.tail.fired.Load() {
			obs.Detail = "the server held the connection open after the answer's last event"
		}
	default:
		return unread("unexpected content type " + s.clean(mt))
	}
	obs.Wait, obs.HasWait = t.wait, t.hasWait
	obs.Bytes = body.n
	obs.Elapsed = max(body.end, obs.TTFB)
	obs.ITLMean, obs.ITLMax, obs.HasITL = st.itl.figures()

	charged, cut := s.classify(parent, ctx, g, &obs, st, readErr, req.Slow5xxAfter)
	if charged {
		s.charge(parent, ctx, &obs, st, req, cut, streamed)
	}
	if obs.Outcome == admit.OK {
		s.rate.observe(obs)
	}
	s.release(ctx, g, resp)
	return obs
}
