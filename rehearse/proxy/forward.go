package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/retrygate/retrygate/rehearse/seat"
)

// This file is the last room a request passes through: its answer on
// the way to the client. Nothing is committed to the client (no status
// line, no header) before the answer is accepted: a stream at its first
// content (the seat says when: seat.Request.OnContent), a whole answer
// when it is whole, an error only when it is final. What comes before
// is held, bounded; an attempt that fails before its commit is thrown
// away (kept, when whole, as the provider's last answer) and the next
// attempt begins, so a retry or a failover is invisible to the client.

// hopHeaders are connection-level headers a proxy never forwards
// (RFC 9110 §7.6.1), plus the ones the proxy owns.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true, "Host": true,
	// The answer is read (for its tokens and first content) on the way
	// through, so it must not be compressed: ask for identity.
	"Accept-Encoding": true,
	headerJob:         true,
	// The proxy has read the whole body before it forwards: there is
	// nothing left to wait a 100 Continue for.
	"Expect": true,
}

// hop reports whether header k is not forwarded: one of hopHeaders, or
// one that its header block's Connection values (conn) name, which is as
// connection-level as those (RFC 9110 §7.6.1).
func hop(conn []string, k string) bool {
	return hopHeaders[k] || httpguts.HeaderValuesContainsToken(conn, k)
}

// copyHeaders shares src's value slices: neither side changes a value
// in place (a Set or Del replaces the map entry), so no copy is needed.
func copyHeaders(dst, src http.Header) {
	conn := src["Connection"]
	for k, vs := range src {
		if hop(conn, k) {
			continue
		}
		dst[k] = vs
	}
}

// maxHeld bounds what one attempt holds before its commit: a whole
// answer the seat reads (seat.MaxLine) and an error body's head.
const maxHeld = seat.MaxLine + 64<<10

// forward is one client request's answer: where it goes, and whether it
// has begun (committed).
type forward struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	client *http.Request

	// committed is the exchange whose answer the client is getting (nil:
	// none yet); wrote says a status line went out (the proxy's own
	// answers too).
	committed *exchange
	wrote     bool
	writeErr  error

	// mu orders the clocks' cuts (unblock, from their own goroutines)
	// against the handler's write deadlines and its judgement (settle).
	mu      sync.Mutex
	cut     bool // unblock moved the write deadline into the past
	settled bool // the answer is judged: only the handler sets the deadline

	// st is the committed stream as a continuation is stitched onto it
	// (cont.go); nil: a stream the proxy does not continue.
	st *stitch
}

func newForward(w http.ResponseWriter, r *http.Request) *forward {
	return &forward{w: w, rc: http.NewResponseController(w), client: r}
}

// keptAnswer is an upstream answer kept whole: the provider's last answer,
// forwarded as it came when it turns out final.
type keptAnswer struct {
	status int
	header http.Header
	length int64 // its Content-Length; -1: none
	body   []byte
}

// head writes an answer's status line and headers, the upstream's but
// hop-by-hop ones; final adds x-should-retry: false (both official SDKs
// obey it), as on every final failure.
func (f *forward) head(status int, h http.Header, length int64, final bool) {
	dst := f.w.Header()
	copyHeaders(dst, h)
	if length >= 0 {
		dst.Set("Content-Length", strconv.FormatInt(length, 10))
	}
	if final {
		dst.Set("X-Should-Retry", "false")
	}
	f.w.WriteHeader(status)
	f.wrote = true
}

// writeKept sends a kept answer as the final one.
func (f *forward) writeKept(a *keptAnswer) {
	f.head(a.status, a.header, a.length, true)
	f.send(a.body, true)
	f.settle(false)
}

// send writes b to the client, each write bounded by writeStall; flush
// sends it at once.
func (f *forward) send(b []byte, flush bool) {
	if f.writeErr != nil {
		return
	}
	if len(b) > 0 {
		f.writeDeadline()
		if _, err := f.w.Write(b); err != nil {
			f.writeErr = fmt.Errorf("%w: %w", errClientWrite, err)
			return
		}
	}
	if flush {
		f.flush()
	}
}

// flush sends what is written and not yet sent.
func (f *forward) flush() {
	if f.writeErr == nil && f.wrote {
		f.writeDeadline()
		if err := f.rc.Flush(); err != nil {
			f.writeErr = fmt.Errorf("%w: %w", errClientWrite, err)
		}
	}
}

// writeDeadline gives the next write writeStall, unless the attempt is
// cut (unblock), whose deadline in the past it keeps.
func (f *forward) writeDeadline() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.cut {
		_ = f.rc.SetWriteDeadline(time.Now().Add(writeStall))
	}
}

// unblock ends a write to the client that waits on a client no longer
// reading, as the attempt is cut: without it, a client that stops
// reading a stream would hold its handler (and its slot) past every
// timeout. The answer is cut anyway, so the connection is spent. A clock
// runs it on its own goroutine, which may come late: once the answer is
// judged (settle) it does nothing. Before a commit nothing is being
// written, and nothing is cut.
func (f *forward) unblock() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.settled && f.committed != nil {
		f.cut = true
		_ = f.rc.SetWriteDeadline(time.Unix(1, 0))
	}
}

// settle is the answer judged: from here on only the handler sets the
// write deadline, and the clocks' cuts do nothing. An answer cut mid-way
// keeps (or gets) one in the past: its connection is aborted, and its
// last flush must not wait on a client that stopped reading. Anything
// else gets writeStall for what is left to write.
func (f *forward) settle(cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled, f.cut = true, cut
	if cut {
		_ = f.rc.SetWriteDeadline(time.Unix(1, 0))
	} else {
		_ = f.rc.SetWriteDeadline(time.Now().Add(writeStall))
	}
}

// reopen is the client's stream, cut upstream, held open for a
// continuation: the clocks' cuts of the attempt before do not stand, and
// none cuts it until the continuation commits.
func (f *forward) reopen() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut, f.settled, f.committed = false, false, nil
	_ = f.rc.SetWriteDeadline(time.Now().Add(writeStall))
}

func (f *forward) failed() bool { return f.writeErr != nil }

// errClientWrite is a write to the client that failed: it hung up, or
// read nothing for writeStall.
var errClientWrite = errors.New("proxy: the write to the client failed")

// exchangeMode is how an answer reaches the client.
type exchangeMode uint8

const (
	// modeWhole: held until it is whole (a JSON answer), or until it is
	// final (an error status).
	modeWhole exchangeMode = iota
	// modeStream: a stream (SSE or NDJSON), framed into events, held
	// until its first content, then forwarded event by event.
	modeStream
	// modePass: forwarded as it comes, from its headers on (a request
	// the gate does not time).
	modePass
)

// exchange is one attempt's exchange with a seat's origin: the seat's
// RoundTripper for that attempt (it sends the client's own request), and
// the answer's body as the seat reads it, each read held or forwarded.
// The request has no GetBody: http.Transport never sends it twice.
type exchange struct {
	f    *forward
	u    *upstream // the seat: the client's request-target goes to its origin
	body []byte
	pass bool // a pass-through: committed at its headers
	// cont: the attempt continues the client's open stream (cont.go):
	// committed without a status line, its events stitched on.
	cont bool

	// The answer, once its headers came.
	status    int
	header    http.Header
	length    int64 // Content-Length; -1: unknown
	mode      exchangeMode
	up        io.ReadCloser
	cancel    context.CancelFunc // ends the upstream request: a read in progress returns at once
	detach    func() bool        // unhooks it from the seat's context
	seatCtx   context.Context
	errStatus atomic.Bool // a status past 2xx: its body is read even if the client leaves
	eof       bool

	held      bytes.Buffer // what came before the commit
	over      bool         // held ran past maxHeld: not kept
	pend      []byte       // a stream's event not yet whole
	dropped   int          // malformed events dropped (modeStream)
	committed bool
}

// RoundTrip sends the client's request (method, request-target, headers,
// body) to the seat's origin through the seat's own http.Transport. The
// upstream request outlives the seat's context: when the seat has read
// what it needs, the rest of the answer is still forwarded (or kept). It
// is cancelled with the seat's context (hard timeout, wait cap, client
// gone) until the seat closes the body. The context's values, the seat's
// stopwatch trace among them, are the exchange's.
func (x *exchange) RoundTrip(seatReq *http.Request) (*http.Response, error) {
	x.held.Reset() // the seat may send again on a new connection: nothing of the first was read
	ctx, cancel := context.WithCancel(context.WithoutCancel(seatReq.Context()))
	detach := context.AfterFunc(seatReq.Context(), cancel)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: interim()})
	resp, err := x.u.rt.RoundTrip(x.request(ctx, seatReq.Header))
	if err == nil && resp.StatusCode < 200 {
		// A protocol switch nobody asked for (Upgrade is not forwarded),
		// or a status below 100 that Go's parser takes ("000"): a
		// malformed answer, as one it cannot parse.
		_ = resp.Body.Close()
		err = fmt.Errorf("proxy: malformed HTTP status code %03d", resp.StatusCode)
	}
	if err != nil {
		detach()
		cancel()
		return nil, err
	}
	x.status, x.header, x.length, x.seatCtx = resp.StatusCode, resp.Header, resp.ContentLength, seatReq.Context()
	x.up, x.cancel, x.detach = resp.Body, cancel, detach
	x.errStatus.Store(resp.StatusCode > 299)
	switch {
	case x.pass && resp.ContentLength < 0:
		x.mode = modePass
		x.commit(false)
	case resp.StatusCode <= 299 && streamed(resp.Header.Get("Content-Type")):
		x.mode = modeStream
	default:
		x.mode = modeWhole
	}
	resp.Body = x
	return resp, nil
}

// streamed says whether a 2xx answer's content type is a stream the
// client reads event by event.
func streamed(ct string) bool {
	switch mediaType(ct) {
	case "text/event-stream", "application/x-ndjson", "application/ndjson", "application/jsonl":
		return true
	}
	return false
}

// interim is one exchange's hook on the informational answers before
// its real one, which http.Transport reads past. It ends the exchange on
// a 1xx other than 100 Continue and 103 Early Hints (102 Processing or a
// made-up 1xx is in no provider's wire format, and the client behind the
// proxy would never see it), and once the 1xx header blocks pass
// maxInterim bytes (with a hook, the Transport no longer counts them
// against its own header bound). The seat takes either as a malformed
// answer: 502.
func interim() func(int, textproto.MIMEHeader) error {
	n := 0
	return func(code int, h textproto.MIMEHeader) error {
		if code != http.StatusContinue && code != http.StatusEarlyHints {
			return fmt.Errorf("proxy: malformed HTTP answer: informational status %d", code)
		}
		n += len("HTTP/1.1 103 Early Hints\r\n\r\n")
		for k, vs := range h {
			for _, v := range vs {
				n += len(k) + len(v) + len(": \r\n")
			}
		}
		if n > maxInterim {
			return fmt.Errorf("proxy: response headers exceeded %d bytes in 1xx answers", maxInterim)
		}
		return nil
	}
}

// maxInterim bounds the 1xx header blocks of one answer, as the seat's
// transport bounds a header block.
const maxInterim = 64 << 10

// request is the client's request as it goes to the seat's origin: its
// method, request-target (its query merged with the seat's: upstream.query)
// and headers but hop-by-hop ones, the origin's Host, the body. With api_key_env the seat's own key (auth, as the seat
// sets it) replaces the client's.
func (x *exchange) request(ctx context.Context, auth http.Header) *http.Request {
	client := x.f.client
	u := *client.URL
	u.Scheme, u.Host, u.User, u.Fragment = x.u.origin.Scheme, x.u.origin.Host, nil, ""
	u.RawQuery, u.ForceQuery = x.u.query(client.URL.RawQuery), false
	h := make(http.Header, len(client.Header)+1)
	copyHeaders(h, client.Header)
	if x.u.inject {
		delete(h, "Authorization")
		delete(h, "X-Api-Key")
		for _, k := range [...]string{"Authorization", "X-Api-Key"} {
			if v := auth.Get(k); v != "" {
				h.Set(k, v)
			}
		}
	}
	var body io.ReadCloser = http.NoBody
	if len(x.body) > 0 {
		body = io.NopCloser(bytes.NewReader(x.body)) // no GetBody: never replayed
	}
	req := &http.Request{Method: client.Method, URL: &u, Host: x.u.origin.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: body, ContentLength: int64(len(x.body))}
	return req.WithContext(ctx)
}

// Read is the answer's body as the seat (then rest) reads it: each read
// is held, or, once the answer is committed, written to the client
// before the reader sees it.
func (x *exchange) Read(p []byte) (int, error) {
	n, err := x.up.Read(p)
	x.eof = x.eof || err == io.EOF
	if n > 0 {
		x.take(p[:n])
	}
	if err == io.EOF && x.mode == modeStream && len(x.pend) > 0 {
		// An event left without its closing blank line when the stream
		// ends cleanly is still an event, as the seat reads it.
		x.event(x.pend)
		x.pend = x.pend[:0]
	}
	if x.committed && x.mode == modeStream && err == nil {
		// A stream's reads are flushed as they come, but the last: the
		// handler ends at once, and the server sends it with the body's
		// end.
		x.f.flush()
	}
	return n, err
}

// take is one read of the answer's body.
func (x *exchange) take(b []byte) {
	if x.mode != modeStream {
		if x.committed {
			x.f.send(b, false)
		} else {
			x.hold(b)
		}
		return
	}
	x.pend = append(x.pend, b...)
	ndjson := mediaType(x.header.Get("Content-Type")) != "text/event-stream"
	for {
		n := eventEnd(x.pend, ndjson)
		if n < 0 {
			break
		}
		x.event(x.pend[:n])
		x.pend = x.pend[n:]
	}
	if len(x.pend) > maxHeld {
		// No event boundary in a megabyte: not a stream any client
		// reads; forwarded as it is, the seat judges it.
		x.event(x.pend)
		x.pend = x.pend[:0]
	}
	if len(x.pend) == 0 {
		x.pend = nil // the buffer of a long stream is not kept idle
	}
}

// event is one whole event of a stream: dropped when its data cannot be
// parsed (a gateway that forwarded it would end the client's stream in
// a JSON error; the event carries nothing a client could read), else
// held or written.
func (x *exchange) event(ev []byte) {
	sse := mediaType(x.header.Get("Content-Type")) == "text/event-stream"
	if malformedEvent(ev, !sse) {
		x.dropped++
		return
	}
	if st := x.f.st; st != nil && sse {
		if x.cont {
			if ev = st.rewrite(ev); ev == nil {
				return
			}
		} else {
			st.observe(ev)
		}
	}
	if x.committed {
		x.f.send(ev, false)
		return
	}
	x.hold(ev)
}

// hold keeps b until the answer is committed or thrown away. A stream
// that sends more than maxHeld before its first content is committed as
// it is; anything else that long is not kept (a final failure then gets
// the proxy's own answer).
func (x *exchange) hold(b []byte) {
	if x.over {
		return
	}
	if x.held.Len()+len(b) > maxHeld {
		if x.mode == modeStream || x.pass {
			x.commit(false)
			x.f.send(b, true)
			return
		}
		x.over = true
		x.held.Reset()
		return
	}
	x.held.Write(b)
}

// content is the seat seeing the answer's first content
// (seat.Request.OnContent): a stream is committed there.
func (x *exchange) content() {
	if x.mode == modeStream && !x.committed {
		x.commit(false)
	}
}

// commit sends the answer's status line, headers and what was held:
// from here on the client has this answer, and a cut of it is a cut
// client connection. A stream goes without a Content-Length: a dropped
// event changes its length.
func (x *exchange) commit(final bool) {
	length := x.length
	if x.mode == modeStream {
		length = -1
	}
	x.committed = true
	x.f.mu.Lock() // unblock reads it from a clock's goroutine
	x.f.committed = x
	x.f.mu.Unlock()
	if x.cont {
		x.f.send(x.held.Bytes(), true) // onto the client's open stream: its head went with the first
		x.held = bytes.Buffer{}
		return
	}
	x.f.head(x.status, x.header, length, final)
	x.f.send(x.held.Bytes(), x.mode != modeWhole || x.eof)
	x.held = bytes.Buffer{}
}

// kept is the answer as the provider's last one, when it was held whole.
func (x *exchange) kept() *keptAnswer {
	if x.status == 0 || x.committed || x.over || !x.eof {
		return nil
	}
	body := bytes.Clone(x.held.Bytes())
	if x.mode == modeStream {
		body = append(body, x.pend...)
	}
	length := x.length
	if length >= 0 {
		length = int64(len(body))
	}
	return &keptAnswer{status: x.status, header: x.header, length: length, body: body}
}

// Close releases the upstream request from the seat's context; the
// proxy closes the upstream body itself once the rest is forwarded or
// kept. A seat closing it because its context ended cancels the
// upstream request instead, and frees a write stuck on a client that
// stopped reading (unblock).
func (x *exchange) Close() error {
	if x.seatCtx.Err() != nil {
		x.cancel()
		if !x.heldOpen() {
			x.f.unblock()
		}
	} else {
		x.detach()
	}
	return nil
}

// heldOpen says the seat ended a complete answer whose provider held
// the connection open past seat.TailGrace: the answer is whole, and
// nothing of it is left to forward.
func (x *exchange) heldOpen() bool {
	return x.seatCtx != nil && errors.Is(context.Cause(x.seatCtx), seat.ErrHeldOpen)
}

// end ends the exchange: a body read to its end has given its
// connection back to the transport; one that was not closes it.
func (x *exchange) end() {
	if x.up == nil {
		return
	}
	x.detach()
	_ = x.up.Close()
	x.cancel()
}

// rest reads what the seat left unread (after a stream's terminal
// event, past the seat's read bounds) until the upstream body ends,
// parent does or until passes: forwarded once committed, else held. It
// returns nil when the body was read to its end (and, committed, the
// client got it), else why not: the context's error (the hard timeout,
// the client gone), the write to the client that failed, or the
// upstream body's read error (a short or malformed body).
func (x *exchange) rest(parent context.Context, until time.Time) error {
	f := x.f
	if x.heldOpen() {
		x.eof = true // its end, for the client: the handler's return ends its body
	}
	if x.up == nil || x.eof {
		return f.writeErr // the seat read it to its end (most answers): no clock
	}
	ctx, cancel := context.WithDeadline(parent, until)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { x.cancel(); f.unblock() })
	defer stop()
	// Most answers have nothing left once the seat has read its last
	// event: a pooled buffer, not 32 KiB a request for an EOF.
	bp := restBufs.Get().(*[restBuf]byte)
	defer restBufs.Put(bp)
	buf := bp[:]
	why := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err() // the cut came first: its abort failed the read or write
		}
		if f.writeErr != nil {
			return f.writeErr
		}
		return err
	}
	for !f.failed() && !(x.over && !x.committed) {
		_, err := x.Read(buf)
		if err == io.EOF && !f.failed() {
			return nil
		}
		if err != nil {
			return why(err)
		}
	}
	return why(nil)
}

const restBuf = 32 << 10

var restBufs = sync.Pool{New: func() any { return new([restBuf]byte) }}

// mediaType is a Content-Type's media type, lower-cased, without its
// parameters.
func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}
