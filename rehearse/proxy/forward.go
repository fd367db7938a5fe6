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
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

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

// forward is one client request on its way upstream: what the seat's
// transport sends, and where the answer's bytes go as the seat reads them.
type forward struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	client *http.Request
	u      *upstream // the seat: the client's request-target goes to its origin
	body   []byte

	// up is the exchange with the origin once its answer's headers came
	// (its body); seatCtx is the seat's context for it.
	up      *tee
	seatCtx context.Context

	// errStatus: the answer is an error status. Its (bounded) body is read
	// to the end even when the client hangs up without it, as the SDKs do
	// before retrying: the attempt failed with that status, it was not
	// cancelled.
	errStatus atomic.Bool

	// status is the answer's, once its headers came; wrote says they
	// were written for the client (see RoundTrip: a stream's at once, an
	// answer of known length's with its first byte).
	status int
	wrote  bool

	ctx clientCtx // the attempt's parent context

	writeErr error

	// mu orders the clocks' cuts (unblock, from their own goroutines)
	// against the handler's write deadlines and its judgement (settle).
	mu      sync.Mutex
	cut     bool // unblock moved the write deadline into the past
	settled bool // the answer is judged: only the handler sets the deadline
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, u *upstream, body []byte) *forward {
	return &forward{w: w, rc: http.NewResponseController(w), client: r, u: u, body: body}
}

type forwardKey struct{}

// clientCtx is a forwarded attempt's parent context: it carries the
// forward (the transport's only value) and ends when the client hangs up,
// unless the answer is an error status (forward.errStatus), whose body is
// read to its end all the same. A context made under it learns of the
// hang-up through AfterFunc, which the context package calls for a
// parent that has it.
type clientCtx struct {
	f *forward
	r context.Context // the client's request's
}

func (*clientCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is the client's; nil (never) once the answer is an error status.
func (c *clientCtx) Done() <-chan struct{} {
	if c.f.errStatus.Load() {
		return nil
	}
	return c.r.Done()
}

func (c *clientCtx) Err() error {
	if c.f.errStatus.Load() {
		return nil
	}
	return c.r.Err()
}

func (c *clientCtx) Value(key any) any {
	if key == (forwardKey{}) {
		return c.f
	}
	return nil
}

// AfterFunc runs fn when the client hangs up, unless by then the answer
// is an error status.
func (c *clientCtx) AfterFunc(fn func()) (stop func() bool) {
	return context.AfterFunc(c.r, func() {
		if !c.f.errStatus.Load() {
			fn()
		}
	})
}

// transport is the seat's RoundTripper: it sends the client's own request
// (method, request-target, headers, body) to the seat's origin through
// the seat's own http.Transport, writes the answer's headers to the
// client, and hands the seat a body that copies every byte to the client
// as the seat reads it. The request has no GetBody: http.Transport never
// sends it twice (the seat sends it again, on a new connection, only
// when not a byte of it was written).
type transport struct{}

func (transport) RoundTrip(seatReq *http.Request) (*http.Response, error) {
	f, _ := seatReq.Context().Value(forwardKey{}).(*forward)
	if f == nil {
		return nil, errors.New("proxy: no client request to forward")
	}
	// The upstream request outlives the seat's context: when the seat has
	// read what it needs, the rest of the answer is still forwarded. It
	// is cancelled with the seat's context (hard timeout, wait cap, client
	// gone) until the seat closes the body. The context's values, the
	// seat's stopwatch trace among them, are the exchange's.
	ctx, cancel := context.WithCancel(context.WithoutCancel(seatReq.Context()))
	detach := context.AfterFunc(seatReq.Context(), cancel)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: interim()})
	resp, err := f.u.rt.RoundTrip(f.request(ctx, seatReq.Header))
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
	f.status, f.seatCtx = resp.StatusCode, seatReq.Context()
	// An answer of known length is one document: its headers leave with
	// its first byte (or its end, when it has none), so an upstream that
	// sends headers and then nothing, or a short first read, is still
	// the proxy's 502 or 504.
	f.up = &tee{f: f, stream: resp.ContentLength < 0, rc: resp.Body, cancel: cancel, detach: detach}
	if resp.StatusCode > 299 {
		f.errStatus.Store(true)
	}
	h := f.w.Header()
	copyHeaders(h, resp.Header)
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	if f.up.stream {
		// The SDK's stream object, before a model's first chunk: a cut
		// from here on is a dropped connection.
		f.head()
		f.flush()
	}
	resp.Body = f.up
	return resp, nil
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

// head writes the answer's status line and headers for the client, once.
func (f *forward) head() {
	if !f.wrote {
		f.w.WriteHeader(f.status)
		f.wrote = true
	}
}

// unhead clears the upstream's headers from an answer the proxy makes
// itself instead (none of them was written).
func (f *forward) unhead() {
	if !f.wrote {
		clear(f.w.Header())
	}
}

// request is the client's request as it goes to the seat's origin: its
// method, request-target and headers but hop-by-hop ones, the origin's
// Host, the body. With api_key_env the seat's own key (auth, as the seat
// sets it) replaces the client's.
func (f *forward) request(ctx context.Context, auth http.Header) *http.Request {
	u := *f.client.URL
	u.Scheme, u.Host, u.User, u.Fragment = f.u.origin.Scheme, f.u.origin.Host, nil, ""
	h := make(http.Header, len(f.client.Header)+1)
	copyHeaders(h, f.client.Header)
	if f.u.inject {
		delete(h, "Authorization")
		delete(h, "X-Api-Key")
		for _, k := range [...]string{"Authorization", "X-Api-Key"} {
			if v := auth.Get(k); v != "" {
				h.Set(k, v)
			}
		}
	}
	var body io.ReadCloser = http.NoBody
	if len(f.body) > 0 {
		body = io.NopCloser(bytes.NewReader(f.body)) // no GetBody: never replayed
	}
	req := &http.Request{Method: f.client.Method, URL: &u, Host: f.u.origin.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: body, ContentLength: int64(len(f.body))}
	return req.WithContext(ctx)
}

// tee is the upstream answer's body as the seat (then rest) reads it:
// each read is written to the client before the reader sees it. With it
// goes the upstream request's cancel.
type tee struct {
	f      *forward
	stream bool // of unknown length: each read is flushed
	rc     io.ReadCloser
	cancel context.CancelFunc // ends the upstream request: a read in progress returns at once
	detach func() bool        // unhooks it from the seat's context
	eof    bool               // read to its end
}

func (t *tee) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	t.eof = t.eof || err == io.EOF
	if n > 0 && (t.f.wrote || err == nil || err == io.EOF) {
		// A stream's reads are flushed as they come, but the last: the
		// handler ends at once, and the server sends it with the body's
		// end. A body of known length is one document no client reads in
		// part: it goes as the server's buffer fills, and its end with
		// the handler's. A stream's bytes before a break are flushed:
		// the client sees them, then the dropped connection. (A first
		// read of a body of known length that comes with a break is not
		// sent: the answer is the proxy's 502.)
		t.f.send(p[:n], t.stream && err != io.EOF)
	}
	if err == io.EOF {
		t.f.head() // an empty body
	}
	return n, err
}

// Close releases the upstream request from the seat's context; the
// proxy closes the upstream body itself once the rest is forwarded. A
// seat closing it because its context ended cancels the upstream
// request instead, and frees a write stuck on a client that stopped
// reading (unblock).
func (t *tee) Close() error {
	if t.f.seatCtx.Err() != nil {
		t.cancel()
		t.f.unblock()
	} else {
		t.detach()
	}
	return nil
}

// end ends the exchange: a body read to its end has given its
// connection back to the transport; one that was not closes it.
func (t *tee) end() {
	t.detach()
	_ = t.rc.Close()
	t.cancel()
}

// send writes b to the client, each write bounded by writeStall. The
// first write of an answer of known length writes its headers and is
// flushed: from then on its headers have left.
func (f *forward) send(b []byte, flush bool) {
	if f.writeErr != nil {
		return
	}
	if !f.wrote {
		f.head()
		flush = true
	}
	f.writeDeadline()
	if _, err := f.w.Write(b); err != nil {
		f.writeErr = fmt.Errorf("%w: %w", errClientWrite, err)
		return
	}
	if flush {
		f.flush()
	}
}

// flush sends what is written and not yet sent (nothing before the
// headers: a flush would send net/http's own 200).
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

// finish is the handler returning: the upstream exchange is released.
func (f *forward) finish() {
	if f.up != nil {
		f.up.end()
	}
}

// unblock ends a write to the client that waits on a client no longer
// reading, as the attempt is cut: without it, a client that stops
// reading a stream would hold its handler (and its slot) past every
// timeout. The answer is cut anyway, so the connection is spent. A clock
// runs it on its own goroutine, which may come late: once the answer is
// judged (settle) it does nothing.
func (f *forward) unblock() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.settled {
		f.cut = true
		_ = f.rc.SetWriteDeadline(time.Unix(1, 0))
	}
}

// settle is the answer judged: from here on only the handler sets the
// write deadline, and the clocks' cuts do nothing. An answer cut mid-way
// keeps (or gets) one in the past: its connection is aborted, and its
// last flush must not wait on a client that stopped reading. Anything
// else gets writeStall for what is left to write, the end of a whole
// answer or the proxy's own 504 or 502, even after a clock's cut: one
// that came as the answer's last byte was read failed no write, and the
// row says the client got the answer.
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

func (f *forward) failed() bool { return f.writeErr != nil }

// errClientWrite is a write to the client that failed: it hung up, or
// read nothing for writeStall.
var errClientWrite = errors.New("proxy: the write to the client failed")

// rest forwards what the seat left unread (after a stream's terminal
// event, past the seat's read bounds) until the upstream body ends,
// parent does or until passes. It returns nil when the client got the
// answer to its end, else why not: the context's error (the hard
// timeout, the client gone), the write to the client that failed, or the
// upstream body's read error (a short or malformed body).
func (f *forward) rest(parent context.Context, until time.Time) error {
	up := f.up
	if up == nil || up.eof {
		return f.writeErr // the seat read it to its end (most answers): no clock
	}
	ctx, cancel := context.WithDeadline(parent, until)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { up.cancel(); f.unblock() })
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
	for !f.failed() {
		_, err := up.Read(buf) // the tee: what it reads goes to the client
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
