package seat

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// WithTransport is the HTTP seat s (openai, anthropic or ollama) sending
// its attempts through wrap(own), where own is the seat's own
// http.Transport (kept-alive connections, no resend of a written
// request): `retrygate proxy` times a client's own request with the
// seat's stopwatch and readers by wrapping it in a RoundTripper that
// forwards that request. own is returned too, for requests the proxy
// sends untimed. ok is false for a seat of another kind. Redirects are
// still never followed. wrap's RoundTripper keeps http.RoundTripper's
// contract: a response with a body, or an error, never both.
func WithTransport(s Seat, wrap func(own http.RoundTripper) http.RoundTripper) (_ Seat, own http.RoundTripper, ok bool) {
	h, ok := s.(*httpSeat)
	if !ok {
		return nil, nil, false
	}
	c := *h
	c.rt = wrap(h.rt)
	return &c, h.rt, true
}

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

// TailGrace is how long a complete stream (its finish reason and usage
// came) waits for its terminal event after its last event. A server that
// holds the connection open past it without one has its answer ended
// there, whole: the caller is not kept waiting until the server closes.
const TailGrace = 500 * time.Millisecond

// ErrHeldOpen is the cause an attempt's request is cancelled with when
// its answer was complete and its server held the connection open past
// TailGrace: the answer is whole (it is no cut), the connection spent.
var ErrHeldOpen = errors.New("seat: the answer was whole; the server held the connection open")

// tailCut ends the request of a complete answer whose server holds the
// connection open: the guard closes it TailGrace after the last event.
type tailCut struct {
	end   context.CancelCauseFunc
	fired atomic.Bool
}

func (c *tailCut) Close() error {
	c.fired.Store(true)
	c.end(ErrHeldOpen)
	return nil
}

// countingReader is the one read path of every answer body: it counts
// bytes, notes when the first and last of them arrived and when the
// body ended (its EOF or error: a server that holds the connection and
// then closes it has taken that long), and marks the answer's first
// byte on the guard when asked to. Each read is a byte for the guard's
// stall window.
type countingReader struct {
	r       io.Reader
	start   time.Time
	g       *guard
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
		if c.g != nil {
			c.g.touch(now)
		}
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
	tail   tailCut
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
