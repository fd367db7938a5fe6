package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
	if hopHeaders[k] {
		return true
	}
	for _, v := range conn {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), k) {
				return true
			}
		}
	}
	return false
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

// headerHold is how long the answer's headers wait for its first bytes,
// so that both leave in one write: past it they go alone (a model that
// has not started its stream yet).
const headerHold = 200 * time.Microsecond

// forward is one client request on its way upstream: what the seat's
// transport sends, and where the answer's bytes go as the seat reads them.
type forward struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	client *http.Request
	o      *origin // the seat's origin: the client's request-target goes there
	body   []byte
	inject bool // send the seat's own key instead of the client's

	// up is the exchange with the origin once its answer's headers came
	// (its body): up.abort cancels it, up.stop stops the seat's context
	// (seatCtx) from doing so.
	up      *upBody
	seatCtx context.Context

	// errStatus: the answer is an error status. Its (bounded) body is read
	// to the end even when the client hangs up without it, as the SDKs do
	// before retrying: the attempt failed with that status, it was not
	// cancelled.
	errStatus atomic.Bool

	wrote bool // headers were written for the client

	ctx clientCtx // the attempt's parent context

	// The client's ResponseWriter is written by the handler and, once,
	// by the header timer: wmu orders them.
	wmu      sync.Mutex
	dirty    bool // written, not yet flushed
	finished bool // the handler is returning: no more writes
	hold     *time.Timer
	writeErr error
}

type forwardKey struct{}

// clientCtx is a forwarded attempt's parent context: it carries the
// forward (the transport's only value) and ends when the client hangs up,
// unless the answer is an error status (forward.errStatus), whose body is
// read to its end all the same. It is not a child of the client's
// request context (so no cancel of the server's reaches the attempt
// directly): a context made under it learns of the hang-up through
// AfterFunc, which the context package calls for a parent that has it.
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
// (method, request-target, headers, body) to the seat's origin, writes
// the answer's headers to the client at once, and hands the seat a body
// that copies every byte to the client as the seat reads it.
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
	bp := headBufs.Get().(*[]byte)
	head := appendHead((*bp)[:0], f.client.Method, f.client.URL.RequestURI(), f.o.host, f.client.Header, f.inject, seatReq.Header, len(f.body))
	body := f.body
	if len(body) <= inlineBody {
		head, body = append(head, body...), nil // one write
	}
	resp, up, err := f.o.exchange(seatReq.Context(), f.client, head, body)
	if cap(head) <= 64<<10 {
		*bp = head[:0]
		headBufs.Put(bp)
	}
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 100 {
		// Go's parser takes any three digits ("000"); a ResponseWriter
		// panics on them. A malformed answer, as one it cannot parse.
		_ = resp.Body.Close()
		return nil, fmt.Errorf("proxy: malformed HTTP status code %03d", resp.StatusCode)
	}
	f.up, f.seatCtx = up, seatReq.Context()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		f.errStatus.Store(true)
	}
	h := f.w.Header()
	copyHeaders(h, resp.Header)
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", itoa(resp.ContentLength))
	}
	f.w.WriteHeader(resp.StatusCode)
	f.wrote, f.dirty = true, true
	if up.buffered() == 0 {
		// The answer's first bytes are not here yet: its headers wait
		// for them only briefly. When they came with the headers (most
		// answers), the seat's first read sends both, with no timer.
		f.hold = time.AfterFunc(headerHold, f.flush)
	}
	resp.Body = &tee{f: f, r: up, left: resp.ContentLength}
	return resp, nil
}

// tee is the answer's body as the seat reads it: each read is written
// and flushed to the client before the seat sees it.
type tee struct {
	f    *forward
	r    io.Reader
	left int64 // bytes of a Content-Length body still to come; -1 unknown
}

func (t *tee) Read(p []byte) (int, error) {
	if t.left == 0 {
		return 0, io.EOF
	}
	n, err := t.r.Read(p)
	if n > 0 {
		if t.left > 0 {
			t.left -= int64(n)
			if t.left <= 0 && err == nil {
				// The whole body is here: say so now. Waiting for the EOF
				// on another read would race the client, which may hang up
				// the moment it has the last byte, and a hang-up cancels
				// the attempt.
				t.left, err = 0, io.EOF
			}
		}
		// A stream's reads are flushed as they come, but the last: the
		// handler ends at once, and the server sends it with the body's
		// end. A body of known length is one document no client reads in
		// part: it goes as the server's buffer fills, and its end with
		// the handler's.
		t.f.send(p[:n], err == nil && t.left < 0)
	}
	return n, err
}

// Close releases the upstream request from the seat's context; the
// proxy closes the upstream body itself once the rest is forwarded. A
// seat closing it because its context ended (its hook may run before
// the exchange's own) cancels the upstream request instead, and frees a
// write stuck on a client that stopped reading (unblock).
func (t *tee) Close() error {
	if t.f.seatCtx.Err() != nil {
		t.f.up.abort()
		t.f.unblock()
	} else {
		t.f.up.stop()
	}
	return nil
}

func (f *forward) send(b []byte, flush bool) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if f.writeErr != nil || f.finished {
		return
	}
	if _, err := f.w.Write(b); err != nil {
		f.writeErr = err
		return
	}
	f.dirty = true
	if flush {
		f.flushLocked()
	}
}

// flush sends what is written and not yet sent: the held headers when
// the answer's first bytes are slow to come, or the last bytes before the
// proxy does anything slower than ending the handler.
func (f *forward) flush() {
	f.wmu.Lock()
	f.flushLocked()
	f.wmu.Unlock()
}

func (f *forward) flushLocked() {
	if f.dirty && !f.finished && f.writeErr == nil {
		f.dirty = false
		f.writeErr = f.rc.Flush()
	}
}

// finish is the handler returning: the header timer must not touch the
// ResponseWriter after it.
func (f *forward) finish() {
	if f.hold != nil {
		f.hold.Stop()
	}
	f.wmu.Lock()
	f.finished = true
	f.wmu.Unlock()
}

// unblock ends a write to the client that waits on a client no longer
// reading, as the attempt is cut: without it, a client that stops
// reading a stream would hold its handler (and its slot) past every
// timeout. The answer is cut anyway, so the connection is spent.
func (f *forward) unblock() {
	_ = f.rc.SetWriteDeadline(time.Unix(1, 0))
}

func (f *forward) failed() bool {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	return f.writeErr != nil
}

// rest forwards what the seat left unread (after a stream's terminal
// event, past the seat's read bounds) until the upstream body ends or ctx
// does, then closes it.
func (f *forward) rest(ctx context.Context) (cut bool) {
	up := f.up
	if up == nil || up.whole() {
		return false // the seat read it to its end (most answers)
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { up.abort(); f.unblock() })
	defer stop()
	// Most answers have nothing left once the seat has read its last
	// event: a pooled buffer, not 32 KiB a request for an EOF.
	bp := restBufs.Get().(*[restBuf]byte)
	defer restBufs.Put(bp)
	buf := bp[:]
	for !f.failed() {
		n, err := up.Read(buf)
		if n > 0 {
			f.send(buf[:n], err == nil)
		}
		if err == io.EOF {
			return false
		}
		if err != nil {
			return true
		}
	}
	return true
}

const restBuf = 32 << 10

var restBufs = sync.Pool{New: func() any { return new([restBuf]byte) }}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
