package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// This file is the proxy's HTTP/1.1 client to its seats' origins. A
// request is written, and its answer's headers read, on the handler's own
// goroutine. net/http's Transport hands each request to its connection's
// writer goroutine and the answer back from a reader goroutine, and that
// reader then waits on the idle connection with a read that finds nothing:
// on a busy proxy those hand-offs and reads were a fifth of its CPU.
// Connections are kept alive, one request at a time each, as the
// Transport keeps them.

const (
	// maxIdlePerOrigin is how many idle connections an origin keeps:
	// enough for every request in flight at the default --max-concurrent.
	maxIdlePerOrigin = DefaultMaxConcurrent
	// idleTimeout closes a connection nobody used for this long.
	idleTimeout = 90 * time.Second
	// maxResponseHeader bounds an answer's header block.
	maxResponseHeader = 64 << 10
	// max1xx bounds the informational answers before the real one.
	max1xx = 5
	// inlineBody: a request body up to this size is copied behind its
	// headers so both leave in one write; a larger one goes as a second
	// buffer of the same writev.
	inlineBody = 32 << 10
)

var (
	errHeaderTooBig = fmt.Errorf("proxy: server response headers exceeded %d bytes; aborted", maxResponseHeader)
	// errIdleClosed: the origin closed a kept-alive connection as it was
	// reused, before a byte of the request was written (the Transport's
	// words, which the seat knows: the request never reached a server, so
	// the seat sends it on a new connection as the same attempt).
	errIdleClosed = errors.New("proxy: server closed idle connection")
)

// origin is where a seat's requests go (scheme, host and port of its
// base_url) and its idle connections.
type origin struct {
	key    string // scheme://host:port
	addr   string // host:port to dial
	host   string // the Host header, as base_url names it
	tlsCfg *tls.Config
	dialer *net.Dialer

	mu     sync.Mutex
	idle   []*conn // most recently used last
	closed bool
}

func newOrigin(u *url.URL) (*origin, error) {
	o := &origin{host: u.Host, dialer: &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}
	port := u.Port()
	switch u.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		if port == "" {
			port = "443"
		}
		o.tlsCfg = &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}
	default:
		return nil, fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, errors.New("no host")
	}
	for _, c := range u.Host {
		if c < 0x21 || c > 0x7e {
			return nil, errors.New("the host must be ASCII (write an international name in its xn-- form)")
		}
	}
	o.addr = net.JoinHostPort(u.Hostname(), port)
	o.key = u.Scheme + "://" + o.addr
	return o, nil
}

// conn is one kept-alive connection to an origin.
type conn struct {
	o      *origin
	nc     net.Conn
	br     *bufio.Reader
	limit  int64 // bytes a header block may still take; < 0: none
	idleAt time.Time
}

// Read is the connection as br reads it: bounded while headers are read.
func (c *conn) Read(p []byte) (int, error) {
	if c.limit < 0 {
		return c.nc.Read(p)
	}
	if c.limit == 0 {
		return 0, errHeaderTooBig
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.nc.Read(p)
	c.limit -= int64(n)
	return n, err
}

// get is an idle connection (reused true) or a new one.
func (o *origin) get(ctx context.Context, trace *httptrace.ClientTrace) (c *conn, reused bool, err error) {
	if trace != nil && trace.GetConn != nil {
		trace.GetConn(o.addr)
	}
	now := time.Now()
	for {
		o.mu.Lock()
		n := len(o.idle)
		if n == 0 {
			o.mu.Unlock()
			break
		}
		c = o.idle[n-1]
		o.idle[n-1] = nil
		o.idle = o.idle[:n-1]
		o.mu.Unlock()
		idle := now.Sub(c.idleAt)
		// Checked before every reuse (one read that does not wait): an
		// origin that closed it meanwhile has said so by now, and a
		// request written to it could not be sent again safely.
		if idle > idleTimeout || !alive(c.nc) {
			_ = c.nc.Close()
			continue
		}
		if trace != nil && trace.GotConn != nil {
			trace.GotConn(httptrace.GotConnInfo{Conn: c.nc, Reused: true, WasIdle: true, IdleTime: idle})
		}
		return c, true, nil
	}
	c, err = o.dial(ctx, trace)
	if err == nil && trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: c.nc})
	}
	return c, false, err
}

// dial makes a new connection. The context carries the seat's trace,
// whose DNS and connect hooks the dialer calls itself.
func (o *origin) dial(ctx context.Context, trace *httptrace.ClientTrace) (*conn, error) {
	nc, err := o.dialer.DialContext(ctx, "tcp", o.addr)
	if err != nil {
		return nil, err
	}
	if o.tlsCfg != nil {
		if trace != nil && trace.TLSHandshakeStart != nil {
			trace.TLSHandshakeStart()
		}
		tc := tls.Client(nc, o.tlsCfg)
		err := tc.HandshakeContext(ctx)
		if trace != nil && trace.TLSHandshakeDone != nil {
			trace.TLSHandshakeDone(tc.ConnectionState(), err)
		}
		if err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	c := &conn{o: o, nc: nc, limit: -1}
	c.br = bufio.NewReaderSize(c, 4<<10)
	return c, nil
}

// put keeps c for the next request, or closes it when the origin has
// enough idle connections.
func (o *origin) put(c *conn) {
	c.idleAt = time.Now()
	o.mu.Lock()
	if o.closed || len(o.idle) >= maxIdlePerOrigin {
		o.mu.Unlock()
		_ = c.nc.Close()
		return
	}
	o.idle = append(o.idle, c)
	o.mu.Unlock()
}

// closeIdle closes the connections idle since before cutoff (all of them
// when all is set, and the origin keeps none after that).
func (o *origin) closeIdle(cutoff time.Time, all bool) {
	o.mu.Lock()
	if all {
		o.closed = true
	}
	keep := o.idle[:0]
	var drop []*conn
	for _, c := range o.idle {
		if all || c.idleAt.Before(cutoff) {
			drop = append(drop, c)
		} else {
			keep = append(keep, c)
		}
	}
	clear(o.idle[len(keep):])
	o.idle = keep
	o.mu.Unlock()
	for _, c := range drop {
		_ = c.nc.Close()
	}
}

// exchange is one request (req, the client's: the answer is read for
// its method) on an origin: head (its request line and
// headers, and the body when the caller put it there) and body written
// in one go, the answer's headers read. The
// answer's body reads from the connection, which goes back to the origin
// once the body ends. ctx ending before then closes the connection;
// after the answer's headers, the exchange's abort (the returned body's)
// does, and the caller hooks it to what should end the request.
func (o *origin) exchange(ctx context.Context, req *http.Request, head, body []byte) (*http.Response, *upBody, error) {
	trace := httptrace.ContextClientTrace(ctx)
	c, reused, err := o.get(ctx, trace)
	if err != nil {
		return nil, nil, err
	}
	b := &upBody{c: c}
	stop := context.AfterFunc(ctx, b.abort)
	resp, sent, err := c.roundTrip(req, head, body, trace)
	if err == nil {
		b.stop = stop
		b.rc = resp.Body
		// An answer the connection cannot follow with another: a
		// protocol switch, or a body that ends when the connection does.
		b.keep = !resp.Close && resp.StatusCode >= 200
		resp.Body = b
		return resp, b, nil
	}
	stop()
	b.abort()
	if reused && !sent && ctx.Err() == nil {
		// Not a byte reached the origin: the seat sends it again, on a
		// new connection. A request that was written is never sent
		// twice here (it may have reached a server that bills it).
		err = errIdleClosed
	}
	return nil, nil, err
}

// roundTrip writes the request and reads the answer's headers (req is
// the client's, for its method); sent says a byte of the request was
// written.
func (c *conn) roundTrip(req *http.Request, head, body []byte, trace *httptrace.ClientTrace) (*http.Response, bool, error) {
	var err error
	var wrote int64
	if len(body) == 0 {
		var n int
		n, err = c.nc.Write(head)
		wrote = int64(n)
	} else {
		bufs := net.Buffers{head, body}
		wrote, err = bufs.WriteTo(c.nc)
	}
	if trace != nil {
		if trace.WroteHeaders != nil {
			trace.WroteHeaders()
		}
		if trace.WroteRequest != nil {
			trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
		}
	}
	if err != nil {
		return nil, wrote > 0, err
	}
	c.limit = maxResponseHeader
	defer func() { c.limit = -1 }()
	if _, err := c.br.Peek(1); err != nil {
		return nil, true, err
	}
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	for n := 0; ; n++ {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, true, err
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, true, nil
		}
		if n+1 >= max1xx {
			return nil, true, errors.New("proxy: too many 1xx informational responses")
		}
		c.limit = maxResponseHeader
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(resp.StatusCode, map[string][]string(resp.Header)); err != nil {
				return nil, true, err
			}
		}
	}
}

// upBody is an answer's body: at its end the connection goes back to its
// origin for the next request; closed before then, or aborted, the
// connection is closed (a half-read answer cannot be followed).
type upBody struct {
	rc   io.ReadCloser
	keep bool
	stop func() bool // the context hook set while the headers were read

	mu      sync.Mutex
	c       *conn // nil once released or closed
	aborted bool
	eof     bool // read to its end
}

// buffered reports bytes of the body already read from the connection.
func (b *upBody) buffered() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c == nil {
		return 0
	}
	return b.c.br.Buffered()
}

// whole reports the body read to its end.
func (b *upBody) whole() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

func (b *upBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.end(err == io.EOF)
	}
	return n, err
}

// Close ends the exchange; a body not read to its end closes the
// connection.
func (b *upBody) Close() error {
	b.end(false)
	return nil
}

// end releases the connection: back to the origin after a whole answer
// (nothing read ahead of the next one), else closed.
func (b *upBody) end(whole bool) {
	b.mu.Lock()
	c := b.c
	b.c = nil
	aborted := b.aborted
	b.eof = b.eof || whole
	b.mu.Unlock()
	if c == nil {
		return
	}
	if b.stop != nil {
		b.stop()
	}
	if whole && b.keep && !aborted && c.br.Buffered() == 0 {
		c.o.put(c)
		return
	}
	_ = c.nc.Close()
}

// abort cancels the exchange: a read in progress returns at once. Once
// the connection went back to its origin it is no longer this exchange's
// to close.
func (b *upBody) abort() {
	b.mu.Lock()
	c := b.c
	b.aborted = true
	b.mu.Unlock()
	if c != nil {
		_ = c.nc.Close()
	}
}

// headBufs keeps request heads' buffers between requests.
var headBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2<<10); return &b }}

// appendHead is the request line and headers of the client's request as
// sent to the origin: its method and request-target, the origin's Host,
// the client's headers but hop-by-hop ones, and the body's length. With
// inject the seat's own key (auth, as the seat sets it) replaces the
// client's.
func appendHead(b []byte, method, target, host string, h http.Header, inject bool, auth http.Header, n int) []byte {
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	ua := false
	conn := h["Connection"]
	for k, vs := range h {
		if hop(conn, k) || (inject && (k == "Authorization" || k == "X-Api-Key")) {
			continue
		}
		if k == "User-Agent" {
			ua = true
		}
		for _, v := range vs {
			b = appendField(b, k, v)
		}
	}
	if inject {
		for _, k := range [...]string{"Authorization", "X-Api-Key"} {
			if v := auth.Get(k); v != "" {
				b = appendField(b, k, v)
			}
		}
	}
	if !ua {
		b = append(b, "User-Agent: Go-http-client/1.1\r\n"...) // as net/http's Transport sent it
	}
	if n > 0 || (method != http.MethodGet && method != http.MethodHead) {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// appendField writes one header line; a line break in a value (which no
// parsed request holds, but a key from the environment might) is a space.
func appendField(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, ": "...)
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	b = append(b, v...)
	return append(b, "\r\n"...)
}
