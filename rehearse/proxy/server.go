package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// The proxy's own HTTP/1.1 server: what net/http's Server does for one
// connection, without its per-request costs. net/http starts a goroutine
// per request to notice a client hanging up, moves three read deadlines
// per request, and makes a context per request under the connection's;
// at concurrency 64 on two cores each microsecond of that is about 16 of
// the added p50 (docs/proxy.md).
//
// Here a connection has two goroutines for its whole life:
//
//   - its reader parses each request with net/http's own parser
//     (http.ReadRequest) and reads its body, hands it to the handler, and
//     at once reads on: that read is both the next request's first byte
//     and the hang-up of the client whose request is in the handler;
//   - its handler answers the requests in order, one at a time, each into
//     one write where it can (headers, body and the chunked end).
//
// Read deadlines are set only when a request does not arrive whole in one
// read (headers: readHeaderTimeout, body: bodyTimeout) and, for the idle
// wait, at most every idleSlack: a kept-alive connection answering a
// request a millisecond sets none.
type server struct {
	p      *Proxy
	errLog *log.Logger

	mu       sync.Mutex
	conns    map[*sconn]struct{}
	draining bool
	lns      []net.Listener
	done     sync.WaitGroup // connections' goroutines
}

var errServerClosed = http.ErrServerClosed

func newServer(p *Proxy, errLog *log.Logger) *server {
	return &server{p: p, errLog: errLog, conns: map[*sconn]struct{}{}}
}

// serve accepts on ln until shutdown; temporary accept errors (too many
// open files) are retried after a growing pause, as net/http does.
func (s *server) serve(ln net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return errServerClosed
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var pause time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closed() {
				return errServerClosed
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				s.errLog.Printf("accept error: %v; retrying in %v", err, pause)
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		c := &sconn{s: s, nc: nc, reqs: make(chan *sreq)}
		c.lim.nc = nc
		c.lim.n = -1
		c.br = bufio.NewReaderSize(&c.lim, 4<<10)
		c.idleCond.L = &c.mu
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			_ = nc.Close()
			return errServerClosed
		}
		s.conns[c] = struct{}{}
		s.done.Add(2)
		s.mu.Unlock()
		go c.handle()
		go c.read()
	}
}

func (s *server) closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// shutdown stops accepting, closes every idle connection, and lets each
// busy one finish the request it has (its answer says Connection: close)
// before it closes. It returns when every connection is gone or ctx ends;
// then it closes the rest.
func (s *server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	conns := make([]*sconn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.drain()
	}
	gone := make(chan struct{})
	go func() { s.done.Wait(); close(gone) }()
	select {
	case <-gone:
		return nil
	case <-ctx.Done():
		s.closeAll()
		<-gone
		return ctx.Err()
	}
}

func (s *server) closeAll() {
	s.mu.Lock()
	s.draining = true
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
}

func (s *server) forget(c *sconn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// sreq is one parsed request on its way from the reader to the handler.
type sreq struct {
	r    *http.Request
	body []byte
	hup  *hangup
	// fail, when set, is the answer the reader made itself (a request it
	// could not take); the connection closes after it.
	fail func(w *sresp)
}

// sconn is one client connection.
type sconn struct {
	s    *server
	nc   net.Conn
	lim  limitedConn
	br   *bufio.Reader
	reqs chan *sreq // reader → handler, unbuffered

	mu       sync.Mutex
	idleCond sync.Cond // pending fell to 0
	pending  int       // requests handed to the handler and not yet answered
	cur      *hangup   // the request the handler is on
	waiting  bool      // the reader waits for a request's first byte
	closing  bool      // no request after the one in hand
	lastDone time.Time // the handler's last answer ended
	dead     bool      // the reader gave up: the handler closes the connection

	// The write deadline: moved by write at most every idleSlack, unless a
	// handler set its own (held) for the rest of the connection.
	wmu    sync.Mutex
	wArmed time.Time
	wHeld  bool

	// The reader's deadline bookkeeping (reader only).
	armed    time.Time // when the idle deadline was last set
	deadline bool      // a header or body deadline is set, not the idle one
	served   bool      // a request came: the wait for the next is the idle one
}

// limitedConn reads from nc, at most n bytes while n >= 0 (a header
// block's bound); hit records that the bound, not the client, ended it.
// While copying, what it reads is appended to copy.
type limitedConn struct {
	nc      net.Conn
	n       int64
	hit     bool
	copying bool
	copy    []byte
}

func (l *limitedConn) Read(p []byte) (int, error) {
	if l.n == 0 {
		l.hit = true
		return 0, io.EOF
	}
	if l.n > 0 && int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.nc.Read(p)
	if l.n > 0 {
		l.n -= int64(n)
	}
	if l.copying {
		l.copy = append(l.copy, p[:n]...)
	}
	return n, err
}

// idleSlack is how stale the idle deadline may be: it is moved forward
// only when it was set longer ago than this.
func idleSlack() time.Duration { return min(time.Second, clientIdleTimeout/8) }

// read is the reader: it parses requests and hands them on, in order,
// and reads on for the next one, which tells a hang-up.
func (c *sconn) read() {
	defer c.s.done.Done()
	defer close(c.reqs)
	for {
		q, ok := c.next()
		if !ok {
			return
		}
		last := q.fail != nil || q.r.Close
		if last {
			// Nothing after this request is read as a request: the
			// reader only waits for the client to go (the handler
			// bounds that wait once it has answered).
			_ = c.nc.SetReadDeadline(time.Time{})
		}
		c.mu.Lock()
		c.pending++
		c.mu.Unlock()
		c.reqs <- q
		if last {
			c.drainRest()
			c.gone(errServerClosed)
			return
		}
	}
}

// next waits for a request and parses it, with its body. ok is false
// when the connection is done (the client left, or went quiet).
func (c *sconn) next() (q *sreq, ok bool) {
	c.lim.n, c.lim.hit = int64(MaxHeaderBytes)+4096, false
	if !c.awaitFirstByte() {
		return nil, false
	}
	first := !c.served
	if first {
		c.served, c.deadline = true, true // the idle deadline is set at the next wait
	}
	// The header block is read twice only for its Host lines, which the
	// parser folds into one: from the buffer when it came whole (nearly
	// always), else from a copy of the bytes as they come.
	head, whole := headerBlock(c.br)
	if !whole {
		if !first {
			// A kept-alive connection's header clock starts at the
			// request's first byte; a new one's runs from the connection's
			// start (awaitFirstByte), as net/http's does.
			c.setDeadline(time.Now().Add(readHeaderTimeout))
		}
		c.lim.copy = append(c.lim.copy[:0], head...)
		c.lim.copying = true
	}
	r, err := http.ReadRequest(c.br)
	c.lim.n = -1
	if !whole {
		head, c.lim.copying = c.lim.copy, false
		if len(c.lim.copy) > 4<<10 {
			c.lim.copy = nil
		}
	}
	if err != nil {
		if c.lim.hit {
			return &sreq{fail: plainFail(http.StatusRequestHeaderFieldsTooLarge, "")}, true
		}
		var ne net.Error
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) {
			c.gone(err)
			return nil, false // the client left or went quiet mid-request
		}
		if strings.HasPrefix(err.Error(), "unsupported transfer encoding") {
			return &sreq{fail: plainFail(http.StatusNotImplemented, "")}, true
		}
		return &sreq{fail: plainFail(http.StatusBadRequest, "")}, true
	}
	fr := framingOf(head)
	if msg, code := check(r, fr); code != 0 {
		return &sreq{fail: plainFail(code, msg)}, true
	}
	if fr.te && fr.lengths > 0 {
		// Chunked wins over the length (the parser's reading), but
		// two framings may be a request smuggled past a front end
		// that read the other: answered, then closed (RFC 9112 §6.3).
		r.Close = true
	}
	var body []byte
	if r.Body != http.NoBody && r.Body != nil {
		var fail func(*sresp)
		if body, fail = c.readBody(r); fail != nil {
			return &sreq{r: r, fail: fail}, true
		}
	}
	return &sreq{r: r, body: body, hup: &hangup{}}, true
}

// awaitFirstByte waits for a request's first byte under the idle
// deadline. A timeout while the handler still has a request, or before
// the connection has been idle for clientIdleTimeout, is not the end.
func (c *sconn) awaitFirstByte() bool {
	for {
		if c.br.Buffered() > 0 {
			// Pipelined: the next request is here, unless the
			// connection is closing.
			c.mu.Lock()
			closing, idle := c.closing, c.pending == 0
			c.mu.Unlock()
			if closing {
				c.closeRead(idle)
				return false
			}
			return true
		}
		now := time.Now()
		if !c.served {
			// A new connection's first request is bounded as its header
			// block is: a client that connects and says nothing is not
			// kept for the idle timeout (as net/http does).
			if c.armed.IsZero() {
				_ = c.nc.SetReadDeadline(now.Add(readHeaderTimeout))
				c.armed = now
			}
		} else if c.deadline || now.Sub(c.armed) > idleSlack() {
			if err := c.nc.SetReadDeadline(now.Add(clientIdleTimeout)); err != nil {
				c.gone(err)
				return false
			}
			c.armed, c.deadline = now, false
		}
		c.mu.Lock()
		if c.closing {
			// The server drains, or the handler ended the connection:
			// nothing more is read as a request.
			idle := c.pending == 0
			c.mu.Unlock()
			c.closeRead(idle)
			return false
		}
		c.waiting = true
		c.mu.Unlock()
		_, err := c.br.Peek(1)
		c.mu.Lock()
		c.waiting = false
		busy, last, closing := c.pending > 0, c.lastDone, c.closing
		c.mu.Unlock()
		if closing {
			// What comes now is not read as a request.
			if err == nil {
				c.closeRead(!busy)
			} else {
				c.gone(errServerClosed)
			}
			return false
		}
		if err == nil {
			return true
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && c.served {
			if busy || time.Since(last) < clientIdleTimeout {
				c.armed = time.Time{} // not idle that long yet: wait on
				continue
			}
		}
		c.gone(err)
		return false
	}
}

// closeRead is the reader's end on a closing connection: what the client
// still sends is read and dropped, so that the close is not a reset that
// loses the last answer. With the handler idle that lasts lingerTime;
// while it still answers, until its lingerClose bounds it.
func (c *sconn) closeRead(idle bool) {
	if idle {
		_ = c.nc.SetReadDeadline(time.Now().Add(lingerTime))
	}
	c.drainRest()
	c.gone(errServerClosed)
}

// drainRest reads (and drops) whatever the client still sends after the
// last request the connection takes, until the client goes, or the
// handler, done, bounds the wait (lingerClose).
func (c *sconn) drainRest() {
	c.lim.n = -1
	_, _ = c.br.Discard(c.br.Buffered())
	var buf [512]byte
	for {
		if _, err := c.lim.nc.Read(buf[:]); err != nil {
			return
		}
	}
}

// gone is the reader's end: the client hung up, went quiet past a
// deadline, or the connection was closed. The request in the handler is
// cancelled; the handler closes the connection when it is done.
func (c *sconn) gone(err error) {
	c.mu.Lock()
	c.dead = true
	h := c.cur
	c.mu.Unlock()
	if h != nil {
		h.cancel()
	}
}

// write sends b to the client. A write is bounded by the idle clock: a
// client that reads nothing of its answers for clientIdleTimeout is gone,
// as one that sends nothing is; a failed write cancels the request in
// hand, as the reader's hang-up does. Like the idle read deadline, the write
// deadline moves at most every idleSlack: a busy connection sets it once
// a second, not once a request.
func (c *sconn) write(b []byte) (int, error) {
	c.wmu.Lock()
	if now := time.Now(); !c.wHeld && now.Sub(c.wArmed) > idleSlack() {
		_ = c.nc.SetWriteDeadline(now.Add(clientIdleTimeout))
		c.wArmed = now
	}
	c.wmu.Unlock()
	n, err := c.nc.Write(b)
	if err != nil {
		// The client is gone (or reads nothing): a hang-up, which the
		// reader cannot see while it holds a pipelined request.
		c.gone(err)
	}
	return n, err
}

func (c *sconn) setDeadline(t time.Time) {
	_ = c.nc.SetReadDeadline(t)
	c.deadline = true
}

// headerBlock is what br holds of the next request; whole: it holds the
// whole header block, so reading it cannot wait on the client.
func headerBlock(br *bufio.Reader) (b []byte, whole bool) {
	b, _ = br.Peek(br.Buffered())
	// The first empty line ends it, whichever line end it has.
	end := -1
	if i := bytes.Index(b, []byte("\n\r\n")); i >= 0 {
		end = i + 3
	}
	if i := bytes.Index(b, []byte("\n\n")); i >= 0 && (end < 0 || i+2 < end) {
		end = i + 2
	}
	if end < 0 {
		return b, false
	}
	return b[:end], true
}

// framing is what the parser folds away of a header block (its request
// line first) that the server must still see: how many Host and
// Content-Length field lines it has, and whether it has Transfer-Encoding.
type framing struct {
	hosts, lengths int
	te             bool
}

func framingOf(head []byte) (f framing) {
	first := true
	for line := range bytes.Lines(head) {
		if first {
			first = false
			continue
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
		name, _, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("host")):
			f.hosts++
		case bytes.EqualFold(name, []byte("content-length")):
			f.lengths++
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			f.te = true
		}
	}
	return f
}

// check is what net/http's server asks of a request past its parser:
// HTTP/1.x, one valid Host (required from 1.1 on), valid header names and
// values, and only the 100-continue expectation.
func check(r *http.Request, fr framing) (msg string, code int) {
	if r.ProtoMajor != 1 {
		return "unsupported protocol version", http.StatusHTTPVersionNotSupported
	}
	if r.Method == http.MethodConnect {
		// A gateway in front of one origin, not a forward proxy: no
		// tunnel is opened, nor a CONNECT sent on to the origin.
		return "a gateway, not a forward proxy", http.StatusMethodNotAllowed
	}
	hosts := fr.hosts
	switch {
	case fr.te && !r.ProtoAtLeast(1, 1):
		// Faulty framing (RFC 9112 §6.1): the parser reads a 1.0
		// request by its length, a front end may have read it chunked.
		return "transfer-encoding in an HTTP/1.0 request", http.StatusBadRequest
	case r.ProtoAtLeast(1, 1) && hosts == 0:
		return "missing required Host header", http.StatusBadRequest
	case hosts > 1:
		return "too many Host headers", http.StatusBadRequest
	case hosts == 1 && !httpguts.ValidHostHeader(r.Host):
		return "malformed Host header", http.StatusBadRequest
	}
	for k, vs := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return "invalid header name", http.StatusBadRequest
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return "invalid header value", http.StatusBadRequest
			}
		}
	}
	if e := r.Header.Get("Expect"); e != "" && !strings.EqualFold(e, "100-continue") {
		return "", http.StatusExpectationFailed
	}
	return "", 0
}

// readBody reads r's body whole, bounded by the proxy's MaxBody (413 in
// the provider's error shape past it) and by bodyTimeout when it is not
// here already. A 100-continue expectation is answered first, once the
// handler has answered every request before this one. The handler gets
// the body as bytes; r.Body is left read to its end (http.NoBody).
func (c *sconn) readBody(r *http.Request) (body []byte, fail func(*sresp)) {
	bound := c.s.p.opts.MaxBody
	tooLarge := func(w *sresp) { c.s.p.tooLarge(w) }
	if r.ContentLength > bound {
		return nil, tooLarge
	}
	if r.Header.Get("Expect") != "" {
		// 100-continue (the only expectation check lets by); a 1.0
		// client's is ignored (RFC 9110 §10.1.1).
		r.Header.Del("Expect")
		if r.ContentLength != 0 && r.ProtoAtLeast(1, 1) {
			c.waitIdle()
			if _, err := c.write([]byte("HTTP/1.1 100 Continue\r\n\r\n")); err != nil {
				return nil, func(*sresp) {}
			}
		}
	}
	if r.ContentLength < 0 || int64(c.br.Buffered()) < r.ContentLength {
		c.setDeadline(time.Now().Add(bodyTimeout))
	}
	body, err := readBody(io.LimitReader(r.Body, bound+1), r.ContentLength, bound)
	if err == nil && int64(len(body)) > bound {
		return nil, tooLarge
	}
	if err != nil {
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return nil, plainFail(http.StatusRequestTimeout, "") // and closed (RFC 9110 §15.5.9)
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne):
			return nil, func(*sresp) {} // the client left: no answer
		}
		return nil, plainFail(http.StatusBadRequest, "malformed request body")
	}
	_ = r.Body.Close()
	r.Body = http.NoBody
	return body, nil
}

// waitIdle waits until the handler has answered every request handed to
// it: the reader writes (100 Continue, an error) only between answers.
func (c *sconn) waitIdle() {
	c.mu.Lock()
	for c.pending > 0 {
		c.idleCond.Wait()
	}
	c.mu.Unlock()
}

// drain is shutdown for one connection: closed now if idle, else after
// the request in hand.
func (c *sconn) drain() {
	c.mu.Lock()
	c.closing = true
	idle := c.waiting && c.pending == 0
	c.mu.Unlock()
	if idle {
		_ = c.nc.Close()
	}
}

// handle is the handler goroutine: it answers the reader's requests in
// order, and ends the connection.
func (c *sconn) handle() {
	defer c.s.done.Done()
	defer c.s.forget(c)
	defer c.nc.Close()
	keep := true
	for q := range c.reqs {
		abort := false
		if keep {
			keep, abort = c.serve(q)
		}
		c.mu.Lock()
		c.cur = nil
		c.pending--
		c.lastDone = time.Now()
		c.idleCond.Broadcast()
		// A drain that began after the answer was committed (it could not
		// say close) ends the connection all the same.
		c.closing = c.closing || !keep
		keep = !c.closing
		c.mu.Unlock()
		switch {
		case abort:
			_ = c.nc.Close() // the client sees the answer cut
		case !keep:
			c.lingerClose()
		}
	}
}

// lingerClose ends a connection after its last answer without losing it:
// the write side closes, and the reader reads what the client still sends
// for up to lingerTime, so the client's kernel does not reset the
// connection (discarding the answer) over bytes nobody read.
func (c *sconn) lingerClose() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.nc.SetReadDeadline(time.Now().Add(lingerTime))
		return
	}
	_ = c.nc.Close()
}

// lingerTime is how long a closing connection reads on after its last
// answer (net/http waits as long).
const lingerTime = 500 * time.Millisecond

// serve answers one request. keep: the connection may carry another;
// abort: the handler cut the answer (the connection closes at once).
func (c *sconn) serve(q *sreq) (keep, abort bool) {
	w := &sresp{c: c, h: make(http.Header, 8), req: q.r, hup: q.hup, outp: getBuf()}
	w.out = (*w.outp)[:0]
	defer w.release()
	if q.fail != nil {
		if w.req == nil {
			w.req = &http.Request{Method: http.MethodGet, ProtoMajor: 1, ProtoMinor: 1}
		}
		w.close = true
		q.fail(w)
		if w.raw || w.wroteHeader {
			w.end()
		}
		return false, false
	}
	c.mu.Lock()
	c.cur = q.hup
	dead, closing := c.dead, c.closing
	c.mu.Unlock()
	if dead {
		q.hup.cancel()
	}
	w.close = closing || q.r.Close
	q.r = q.r.WithContext(q.hup)
	w.req = q.r
	defer func() {
		if v := recover(); v != nil {
			keep, abort = false, true
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.errLog.Printf("panic serving %v: %v\n%s", c.nc.RemoteAddr(), v, buf)
			}
		}
	}()
	c.s.p.serve(w, q.r, q.body)
	if q.hup.Err() != nil && (!w.wroteHeader || (w.late && !w.committed)) {
		// The client left, and was given no answer (or one begun only
		// after it left, of the handler's own: a refusal, a 502 for the
		// upstream request its leaving cancelled): none is made up.
		return false, true
	}
	w.end()
	c.wmu.Lock()
	held := c.wHeld
	c.wmu.Unlock()
	return !w.close && w.err == nil && !held, false
}

// plainFail is the server's answer to a request it cannot take, as
// net/http's server gives it: a plain-text status line, then the
// connection closed (with its length and a Date, which net/http's lacks).
func plainFail(code int, msg string) func(*sresp) {
	return func(w *sresp) {
		w.raw = true
		text := strconv.Itoa(code) + " " + http.StatusText(code)
		if msg != "" {
			text += ": " + msg
		}
		w.rawBody = "HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) +
			"\r\nDate: " + httpDate() +
			"\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " + strconv.Itoa(len(text)) +
			"\r\nConnection: close\r\n\r\n" + text
		w.status = code
	}
}

// hangup is a request's context: done when its client hangs up or the
// connection ends. It runs AfterFunc callbacks itself, so contexts made
// under it (the seat's) need no goroutine to watch it.
type hangup struct {
	mu   sync.Mutex
	done chan struct{}
	err  error
	fns  []*afterFn
}

type afterFn struct {
	f    func()
	live bool
}

func (*hangup) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*hangup) Value(any) any               { return nil }

func (h *hangup) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done == nil {
		h.done = make(chan struct{})
		if h.err != nil {
			close(h.done)
		}
	}
	return h.done
}

func (h *hangup) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// AfterFunc runs f (on its own goroutine) when the client hangs up; stop
// keeps it from running.
func (h *hangup) AfterFunc(f func()) (stop func() bool) {
	a := &afterFn{f: f, live: true}
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		a.live = false
		go f()
		return func() bool { return false }
	}
	h.fns = append(h.fns, a)
	h.mu.Unlock()
	return func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		was := a.live
		a.live = false
		return was
	}
}

func (h *hangup) cancel() {
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return
	}
	h.err = context.Canceled
	if h.done != nil {
		close(h.done)
	}
	fns := h.fns
	h.fns = nil
	var run []func()
	for _, a := range fns {
		if a.live {
			a.live = false
			run = append(run, a.f)
		}
	}
	h.mu.Unlock()
	for _, f := range run {
		go f()
	}
}

// sresp is the handler's http.ResponseWriter. The header block, the body
// and (chunked) its end are gathered and leave in as few writes as the
// handler's flushes allow: one, for an answer it never flushes.
type sresp struct {
	c   *sconn
	req *http.Request
	hup *hangup // the request's; nil for the server's own answers
	h   http.Header

	status      int
	wroteHeader bool
	committed   bool // the header block is in out (framing decided)
	late        bool // the header came after the client hung up
	chunked     bool
	cl          int64 // the declared Content-Length; -1 none
	n           int64 // body bytes the handler wrote
	noBody      bool
	close       bool // Connection: close, and close after
	out         []byte
	outp        *[]byte // out's pooled holder
	err         error

	raw     bool // rawBody is the whole answer (plainFail)
	rawBody string
}

var _ http.ResponseWriter = (*sresp)(nil)

func (w *sresp) Header() http.Header { return w.h }

func (w *sresp) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 {
		return // informational answers are not passed on
	}
	w.wroteHeader, w.status = true, code
	w.late = w.hup != nil && w.hup.Err() != nil
	w.cl = -1
	if v := w.h.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			w.cl = n
		} else {
			w.h.Del("Content-Length")
		}
	}
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
}

func (w *sresp) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		if w.req.Method == http.MethodHead {
			return len(b), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.cl >= 0 && w.n+int64(len(b)) > w.cl {
		return 0, http.ErrContentLength
	}
	w.n += int64(len(b))
	if w.committed && w.chunked && len(b) > 0 {
		w.out = strconv.AppendInt(w.out, int64(len(b)), 16)
		w.out = append(w.out, '\r', '\n')
		w.out = append(w.out, b...)
		w.out = append(w.out, '\r', '\n')
	} else {
		w.out = append(w.out, b...)
	}
	if len(w.out) >= 32<<10 {
		return len(b), w.FlushError()
	}
	return len(b), nil
}

// commit puts the header block in front of what is gathered, deciding the
// framing: the declared length, else (the answer still open) chunked for
// an HTTP/1.1 client or to the connection's close for 1.0; at the end
// (whole) the length of what was written.
func (w *sresp) commit(whole bool) {
	if w.committed {
		return
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.committed = true
	body := w.out
	h := w.h
	switch {
	case w.noBody:
	case w.cl >= 0:
	case whole:
		w.cl = int64(len(body))
		h.Set("Content-Length", strconv.FormatInt(w.cl, 10))
	case w.req.ProtoAtLeast(1, 1):
		w.chunked = true
	default:
		w.close = true
	}
	if !w.noBody && len(body) > 0 && w.status != http.StatusNoContent {
		if _, ok := h["Content-Type"]; !ok && h.Get("Content-Encoding") == "" {
			h.Set("Content-Type", http.DetectContentType(body))
		}
	}
	if w.c.closingNow() {
		w.close = true
	}
	headp := getBuf()
	head := (*headp)[:0]
	head = append(head, "HTTP/1.1 "...)
	head = strconv.AppendInt(head, int64(w.status), 10)
	head = append(head, ' ')
	head = append(head, http.StatusText(w.status)...)
	head = append(head, "\r\n"...)
	if _, ok := h["Date"]; !ok {
		head = append(head, "Date: "...)
		head = append(head, httpDate()...)
		head = append(head, "\r\n"...)
	}
	for k, vs := range h {
		if !httpguts.ValidHeaderFieldName(k) || k == "Transfer-Encoding" || k == "Connection" {
			continue
		}
		for _, v := range vs {
			head = appendField(head, k, strings.TrimSpace(newlineToSpace.Replace(v)))
		}
	}
	if w.chunked {
		head = append(head, "Transfer-Encoding: chunked\r\n"...)
	}
	switch {
	case w.close && w.req.ProtoAtLeast(1, 1):
		head = append(head, "Connection: close\r\n"...)
	case !w.close && !w.req.ProtoAtLeast(1, 1):
		head = append(head, "Connection: keep-alive\r\n"...)
	}
	head = append(head, "\r\n"...)
	if w.chunked && len(body) > 0 {
		head = strconv.AppendInt(head, int64(len(body)), 16)
		head = append(head, '\r', '\n')
		head = append(head, body...)
		head = append(head, '\r', '\n')
	} else if !w.noBody {
		head = append(head, body...)
	}
	putBuf(w.outp, body)
	w.outp, w.out = headp, head
}

var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// FlushError sends what is gathered (http.ResponseController's Flush).
func (w *sresp) FlushError() error {
	if w.err != nil {
		return w.err
	}
	w.commit(false)
	if len(w.out) == 0 {
		return nil
	}
	_, err := w.c.write(w.out)
	w.out = w.out[:0]
	if err != nil {
		w.err = err
	}
	return err
}

func (w *sresp) Flush() { _ = w.FlushError() }

// SetWriteDeadline bounds the answer's writes to the client
// (http.ResponseController's): from then on the handler's deadline holds
// (write moves it no more), and the connection is not kept after this
// answer.
func (w *sresp) SetWriteDeadline(t time.Time) error {
	w.c.wmu.Lock()
	defer w.c.wmu.Unlock()
	w.c.wHeld = true
	return w.c.nc.SetWriteDeadline(t)
}

// end is the handler's return: the rest of the answer leaves, with the
// chunked end, in one write. An answer shorter than its declared length
// closes the connection (the client sees it cut).
func (w *sresp) end() {
	if w.raw {
		_, w.err = w.c.write([]byte(w.rawBody))
		return
	}
	w.commit(true)
	if w.chunked {
		w.out = append(w.out, "0\r\n\r\n"...)
	}
	if w.err == nil && len(w.out) > 0 {
		_, w.err = w.c.write(w.out)
	}
	if w.cl >= 0 && w.n < w.cl && !w.noBody {
		w.close = true
	}
}

// answerBufs are the buffers answers gather in: shared by every
// connection, so an idle one holds none.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// maxKeptBuf bounds the buffers kept for the next answer.
const maxKeptBuf = 64 << 10

func getBuf() *[]byte { return answerBufs.Get().(*[]byte) }

func putBuf(p *[]byte, b []byte) {
	if cap(b) <= maxKeptBuf {
		*p = b[:0]
		answerBufs.Put(p)
	}
}

// release hands the answer's buffer back; w is not written after it
// (forward.finish keeps the header timer off it).
func (w *sresp) release() {
	if w.outp != nil {
		putBuf(w.outp, w.out)
	}
	w.outp, w.out = nil, nil
}

// closingNow reports whether the server is draining: answers say
// Connection: close.
func (c *sconn) closingNow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// httpDate is the Date header's value, made once a second.
func httpDate() string {
	now := time.Now().Unix()
	if d := dateCache.Load(); d != nil && d.sec == now {
		return d.s
	}
	d := &cachedDate{sec: now, s: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}

type cachedDate struct {
	sec int64
	s   string
}

var dateCache atomic.Pointer[cachedDate]
