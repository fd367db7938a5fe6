package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"golang.org/x/net/netutil"

	"github.com/retrygate/retrygate/admit"
)

// MaxHeaderBytes bounds a request's header block; past it net/http's
// server answers 431 Request Header Fields Too Large.
const MaxHeaderBytes = 64 << 10

// The server's clocks on a client connection: variables, so that tests
// can shorten them.
var (
	// readHeaderTimeout bounds reading a request's header block.
	readHeaderTimeout = 10 * time.Second
	// bodyTimeout bounds reading a request's body, after its headers.
	bodyTimeout = 30 * time.Second
	// clientIdleTimeout is how long a kept-alive connection may wait for its
	// next request.
	clientIdleTimeout = 2 * time.Minute
	// writeStall bounds one write to a client that reads nothing.
	writeStall = 2 * time.Minute
)

// Serve answers on ln with net/http's server until ctx is done, then
// drains (http.Server.Shutdown): no new request is taken, requests in
// flight (streams included) run to their end or their hard timeout,
// every row is written, and every job still open gets the row that ends
// it. errLog gets the server's own complaints (accept errors, a panic).
func (p *Proxy) Serve(ctx context.Context, ln net.Listener, errLog io.Writer) error {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       clientIdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		Protocols:         protocols,
		ErrorLog:          log.New(errLog, "proxy: ", 0),
	}
	errc := make(chan error, 1)
	// Past MaxConns connections, accepting waits: a connection beyond them
	// waits in the kernel's backlog, holding none of the proxy's memory.
	go func() { errc <- srv.Serve(netutil.LimitListener(ln, p.opts.MaxConns)) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			_ = srv.Close()
			p.Close()
			return err
		case <-tick.C:
			p.Sweep()
			continue
		case <-ctx.Done():
		}
		break
	}
	// Every request is bounded by its hard timeout; the grace on top lets
	// its row be written before the connections are closed.
	sctx, cancel := context.WithTimeout(context.Background(), p.opts.Policy.Timeouts.Hard+2*time.Second)
	defer cancel()
	if srv.Shutdown(sctx) != nil {
		_ = srv.Close()
	}
	p.Close()
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ServeHTTP takes the request's limits before any of its work, in this
// order: a request slot (MaxConcurrent), the declared body length
// (MaxBody), room in the body budget for that length (MaxBodyTotal);
// then it reads the body, bounded by MaxBody (413) and the body clock,
// and serves it. A request refused at any step gets its row (refuse) and
// its body is never read.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.ProtoMajor != 1: // net/http hands a handler "PRI * HTTP/2.0"
		p.refuse(w, r, admit.ReasonBadRequest, refusal{status: http.StatusHTTPVersionNotSupported, code: "http_version", message: "retrygate: the proxy speaks HTTP/1.1"})
		return
	case r.Method == http.MethodConnect:
		p.refuse(w, r, admit.ReasonBadRequest, refusal{status: http.StatusMethodNotAllowed, code: "method", message: "retrygate: a gateway, not a forward proxy: no CONNECT"})
		return
	}
	rt := p.route(r)
	if rt.how == servedRefused {
		p.refuseRoute(w, r, rt)
		return
	}
	select {
	case p.sem <- struct{}{}:
	default:
		unread(w)
		p.refuse(w, r, admit.ReasonProxyBusy, refusal{status: http.StatusServiceUnavailable, code: "busy", retryAfter: time.Second,
			message: fmt.Sprintf("retrygate: proxy busy: %d requests in flight (--max-concurrent)", cap(p.sem))})
		return
	}
	p.wg.Add(1)
	defer func() { <-p.sem; p.wg.Done() }()
	if r.ContentLength > p.opts.MaxBody {
		unread(w)
		p.tooLarge(w, r) // before reading: an Expect: 100-continue body is never sent
		return
	}
	// The body's room in the budget: its declared length, else the most
	// it may be (given back down to its length once read).
	held := r.ContentLength
	if held < 0 {
		held = p.opts.MaxBody
	}
	if !p.bodies.take(r.Context(), held) {
		if r.Context().Err() != nil {
			panic(http.ErrAbortHandler) // the client is gone
		}
		unread(w)
		p.refuse(w, r, admit.ReasonProxyBusy, refusal{status: http.StatusServiceUnavailable, code: "bodies_busy", retryAfter: time.Second,
			message: fmt.Sprintf("retrygate: proxy busy: request bodies in flight hold its %d bytes (--max-body-total)", p.bodies.total)})
		return
	}
	defer func() { p.bodies.give(held) }()
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	body, err := readBody(http.MaxBytesReader(w, r.Body, p.opts.MaxBody), r.ContentLength, p.opts.MaxBody)
	if err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			p.tooLarge(w, r)
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			unread(w)
			p.refuse(w, r, admit.ReasonBadRequest, refusal{status: http.StatusRequestTimeout, code: "request_timeout",
				message: "retrygate: the request body took longer than " + bodyTimeout.String()})
			return
		}
		// The body broke off: the client is gone, nobody to answer.
		panic(http.ErrAbortHandler)
	}
	_ = rc.SetReadDeadline(time.Time{}) // the server's own read notices a hang-up from here on
	if n := int64(cap(body)); n < held {
		p.bodies.give(held - n) // an undeclared body holds what it took
		held = n
	}
	p.serve(w, r, body, rt)
}

// unread marks an answer given before the request's body was read (or
// while it was still coming): the connection closes after it, so
// net/http does not wait to read a body that may never come before it
// answers.
func unread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
}

// tooLarge is the answer to a request body over MaxBody, in the
// provider's error shape, and its row.
func (p *Proxy) tooLarge(w http.ResponseWriter, r *http.Request) {
	p.refuse(w, r, admit.ReasonTooLarge, refusal{status: http.StatusRequestEntityTooLarge, code: "request_too_large",
		message: fmt.Sprintf("retrygate: request body over %d bytes (--max-body)", p.opts.MaxBody)})
}
