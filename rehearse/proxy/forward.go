package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
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

// copyHeaders shares src's value slices: neither side changes a value
// in place (a Set or Del replaces the map entry), so no copy is needed.
func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		if hopHeaders[k] {
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
	url    string   // the upstream URL, origin and the client's request-target
	origin *url.URL // the seat's origin, parsed once (nil: parse url)
	body   []byte
	inject bool // send the seat's own key instead of the client's

	upCancel context.CancelFunc
	release  func() bool // stops cancelling the upstream request when the seat's context ends

	// errStatus: the answer is an error status. Its (bounded) body is read
	// to the end even when the client hangs up without it, as the SDKs do
	// before retrying: the attempt failed with that status, it was not
	// cancelled.
	errStatus atomic.Bool

	mu   sync.Mutex
	resp *http.Response // upstream's, once its headers came

	wrote bool // headers were written for the client

	// The client's ResponseWriter is written by the handler and, once,
	// by the header timer: wmu orders them.
	wmu      sync.Mutex
	dirty    bool // written, not yet flushed
	finished bool // the handler is returning: no more writes
	hold     *time.Timer
	writeErr error
}

type forwardKey struct{}

// transport is the seat's RoundTripper: it sends the client's own request
// (path, query, headers, body) to the seat's origin, writes the answer's
// headers to the client at once, and hands the seat a body that copies
// every byte to the client as the seat reads it.
type transport struct {
	up http.RoundTripper
}

func newUpstream() *http.Transport {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    256,
		IdleConnTimeout:        90 * time.Second,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
		Protocols:              protocols,
	}
}

func (t *transport) RoundTrip(seatReq *http.Request) (*http.Response, error) {
	f, _ := seatReq.Context().Value(forwardKey{}).(*forward)
	if f == nil {
		return nil, errors.New("proxy: no client request to forward")
	}
	// The upstream request outlives the seat's context: when the seat has
	// read what it needs, the rest of the answer is still forwarded. It
	// is cancelled with the seat's context (hard timeout, wait cap, client
	// gone) until the seat closes the body.
	// Its values, the seat's stopwatch trace among them, are kept.
	upCtx, cancel := context.WithCancel(context.WithoutCancel(seatReq.Context()))
	f.upCancel = cancel
	f.release = context.AfterFunc(seatReq.Context(), cancel)

	up, err := f.upstreamRequest(upCtx)
	if err != nil {
		cancel()
		return nil, err
	}
	copyHeaders(up.Header, f.client.Header)
	if f.inject {
		up.Header.Del("Authorization")
		up.Header.Del("X-Api-Key")
		for _, k := range []string{"Authorization", "X-Api-Key"} {
			if v := seatReq.Header.Get(k); v != "" {
				up.Header.Set(k, v)
			}
		}
	}
	resp, err := t.up.RoundTrip(up)
	if err != nil {
		cancel()
		return nil, err
	}
	f.mu.Lock()
	f.resp = resp
	f.mu.Unlock()
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
	f.hold = time.AfterFunc(headerHold, f.flush)
	out := *resp
	out.Body = &tee{f: f, r: resp.Body, left: resp.ContentLength}
	return &out, nil
}

// upstreamRequest is the client's request as sent to the seat's origin:
// its method, path and query, with the body and no header yet. The URL is
// the client's own, on the origin's scheme and host, not parsed again
// from text; a request-target in another form goes through the parser.
func (f *forward) upstreamRequest(ctx context.Context) (*http.Request, error) {
	cu := f.client.URL
	if f.origin == nil || cu.Opaque != "" || cu.Path == "" || cu.User != nil {
		up, err := http.NewRequestWithContext(ctx, f.client.Method, f.url, bytes.NewReader(f.body))
		if err != nil {
			return nil, err
		}
		up.GetBody = nil // never replayed by the transport: one attempt is one request
		up.ContentLength = int64(len(f.body))
		return up, nil
	}
	up, err := http.NewRequestWithContext(ctx, f.client.Method, "", nil)
	if err != nil {
		return nil, err
	}
	up.URL = &url.URL{Scheme: f.origin.Scheme, Host: f.origin.Host, Path: cu.Path, RawPath: cu.RawPath, RawQuery: cu.RawQuery}
	up.Host = f.origin.Host
	up.Header = make(http.Header, len(f.client.Header))
	if len(f.body) > 0 {
		up.Body = io.NopCloser(bytes.NewReader(f.body))
	}
	up.ContentLength = int64(len(f.body))
	return up, nil
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
		// handler ends at once, and net/http sends it with the body's end.
		// A body of known length is one document no client reads in part:
		// it goes as net/http's buffer fills, and its end with the handler's.
		t.f.send(p[:n], err == nil && t.left < 0)
	}
	return n, err
}

// Close releases the upstream request from the seat's context; the
// proxy closes the upstream body itself once the rest is forwarded.
func (t *tee) Close() error {
	if t.f.release != nil {
		t.f.release()
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

func (f *forward) failed() bool {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	return f.writeErr != nil
}

// rest forwards what the seat left unread (after a stream's terminal
// event, past the seat's read bounds) until the upstream body ends or ctx
// does, then closes it.
func (f *forward) rest(ctx context.Context) (cut bool) {
	f.mu.Lock()
	resp := f.resp
	f.mu.Unlock()
	if resp == nil {
		return false
	}
	defer f.upCancel()
	defer resp.Body.Close()
	stop := context.AfterFunc(ctx, f.upCancel)
	defer stop()
	// Most answers have nothing left once the seat has read its last
	// event: a pooled buffer, not 32 KiB a request for an EOF.
	bp := restBufs.Get().(*[restBuf]byte)
	defer restBufs.Put(bp)
	buf := bp[:]
	for !f.failed() {
		n, err := resp.Body.Read(buf)
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
