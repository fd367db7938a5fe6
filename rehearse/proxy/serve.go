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
	"strings"
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
	// Every request is bounded by its job's deadline (its attempts, its
	// waits and its answer's end); the grace on top lets its last row be
	// written before the connections are closed.
	sctx, cancel := context.WithTimeout(context.Background(), max(p.opts.Policy.Budget.Deadline, p.opts.Policy.Timeouts.Hard)+2*time.Second)
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

// ServeHTTP moves a request forward through three rooms, never back:
// admission (admission: every check that refuses a request before any
// job's books), then the job machine (run: the policy's loop), then its
// answer on the way to the client (forward.go). A request refused at
// admission gets its row (refuse), or for a route off the allow-list its
// event line, and its body is never read past the refusal.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in, ref := p.admission(w, r)
	if in != nil {
		defer p.release(in)
	}
	switch {
	case ref == clientGone:
		// Nobody to answer; what the request held is given back (the
		// deferred release) as the server drops the connection.
		panic(http.ErrAbortHandler)
	case ref != nil && ref.code == "":
		p.refuseRoute(w, r, in.route)
	case ref != nil:
		if ref.unread {
			unread(w)
		}
		p.refuse(w, r, *ref)
	case in.route.how != servedGated:
		p.passThrough(w, r, in)
	default:
		p.run(w, r, in)
	}
}

// admitted is a request past admission: its route, its body (read
// within MaxBody) and what the proxy read of it, its job's name, and
// what it holds of the proxy's limits until it ends.
type admitted struct {
	route  routing
	body   []byte
	req    request
	id     string
	named  bool
	client string // its client: the remote address's prefix (clientKey)
	retry  string // the client's retry counter (X-Stainless-Retry-Count), "" when none
	share  bool   // it holds one of its client's share of the slots
	slot   bool   // it holds a request slot
	held   int64  // bytes of the body budget it holds
}

// clientRetry says the request is its client's own retry.
func (in *admitted) clientRetry() bool { return in.retry != "" && in.retry != "0" }

// admission is the one stage of checks before a request reaches its
// job, in this order: the protocol, CONNECT, the route, a request slot
// (MaxConcurrent), the client's share of them (MaxClientConcurrent), the
// declared body length (MaxBody), room for that length in the body
// budget (MaxBodyTotal) and in the client's part of it (bodyShare), the
// body itself (bounded by
// MaxBody and the body clock), then, for a generation, its JSON and its
// job's name. It returns the admitted request (to release, when not
// nil), or the refusal to answer; a refusal with no code is a route off
// the allow-list (in.route says which).
func (p *Proxy) admission(w http.ResponseWriter, r *http.Request) (*admitted, *refusal) {
	switch {
	case r.ProtoMajor != 1: // net/http hands a handler "PRI * HTTP/2.0"
		return nil, &refusal{reason: admit.ReasonBadRequest, status: http.StatusHTTPVersionNotSupported, code: "http_version", message: "retrygate: the proxy speaks HTTP/1.1"}
	case r.Method == http.MethodConnect:
		return nil, &refusal{reason: admit.ReasonBadRequest, status: http.StatusMethodNotAllowed, code: "method", message: "retrygate: a gateway, not a forward proxy: no CONNECT"}
	}
	in := &admitted{route: p.route(r), client: clientKey(r.RemoteAddr, p.opts.ClientPrefixV4, p.opts.ClientPrefixV6), retry: retryCount(r.Header)}
	if in.route.how == servedRefused {
		return in, &refusal{}
	}
	select {
	case p.sem <- struct{}{}:
		in.slot = true
		p.wg.Add(1)
	default:
		return in, &refusal{reason: admit.ReasonProxyBusy, status: http.StatusServiceUnavailable, code: "busy", retryAfter: time.Second, unread: true,
			message: fmt.Sprintf("retrygate: proxy busy: %d requests in flight (--max-concurrent)", cap(p.sem))}
	}
	// A client holds no more than its share of the slots, however many
	// connections it opens: past it, 429 while other clients are served.
	if !p.shares.take(in.client) {
		return in, &refusal{reason: admit.ReasonProxyBusy, status: http.StatusTooManyRequests, code: "client_busy", retryAfter: time.Second, unread: true,
			message: fmt.Sprintf("retrygate: this client has %d requests in flight, its most at once (--max-client-concurrent)", p.opts.MaxClientConcurrent)}
	}
	in.share = true
	if r.ContentLength > p.opts.MaxBody {
		return in, p.tooLarge(true) // before reading: an Expect: 100-continue body is never sent
	}
	// The body's room in the budget: its declared length, else the most
	// it may be (given back down to its length once read).
	held := r.ContentLength
	if held < 0 {
		held = p.opts.MaxBody
	}
	if !p.bodies.take(r.Context(), held) {
		if r.Context().Err() != nil {
			return in, clientGone
		}
		return in, &refusal{reason: admit.ReasonProxyBusy, status: http.StatusServiceUnavailable, code: "bodies_busy", retryAfter: time.Second, unread: true,
			message: fmt.Sprintf("retrygate: proxy busy: request bodies in flight hold its %d bytes (--max-body-total)", p.bodies.total)}
	}
	// The client's part of the budget: one client's large bodies cannot
	// hold the room every other client's body waits for.
	if !p.shares.takeBytes(in.client, held) {
		p.bodies.give(held)
		return in, &refusal{reason: admit.ReasonProxyBusy, status: http.StatusTooManyRequests, code: "client_bodies", retryAfter: time.Second, unread: true,
			message: fmt.Sprintf("retrygate: this client's request bodies in flight hold its %d bytes of --max-body-total", p.shares.bytes)}
	}
	in.held = held
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	body, err := readBody(http.MaxBytesReader(w, r.Body, p.opts.MaxBody), r.ContentLength, p.opts.MaxBody)
	if err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			return in, p.tooLarge(false)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return in, &refusal{reason: admit.ReasonBadRequest, status: http.StatusRequestTimeout, code: "request_timeout", unread: true,
				message: "retrygate: the request body took longer than " + bodyTimeout.String()}
		}
		// The body broke off: the client is gone, nobody to answer.
		return in, clientGone
	}
	_ = rc.SetReadDeadline(time.Time{}) // the server's own read notices a hang-up from here on
	if n := int64(cap(body)); n < held {
		p.bodies.give(held - n) // an undeclared body holds what it took
		p.shares.giveBytes(in.client, held-n)
		in.held = n
	}
	in.body = body
	if in.route.how != servedGated {
		return in, nil
	}
	var ok bool
	if in.req, ok = parseRequest(body); !ok {
		return in, &refusal{reason: admit.ReasonBadRequest, status: http.StatusBadRequest, code: "invalid_json", message: "retrygate: request body is not a JSON object"}
	}
	in.req.responses = p.kind == "openai" && strings.HasSuffix(in.route.r.path, "/responses")
	var bad string
	if in.id, in.named, bad = jobName(r.Header); bad != "" {
		return in, &refusal{reason: admit.ReasonBadRequest, status: http.StatusBadRequest, code: "invalid_job", message: "retrygate: " + bad}
	}
	return in, nil
}

// clientGone is admission's answer for a client that hung up before its
// body was read: the request is aborted, nothing answered, and what it
// held of the limits given back.
var clientGone = &refusal{code: "gone"}

// release gives back what an admitted request held of the proxy's limits.
func (p *Proxy) release(in *admitted) {
	p.bodies.give(in.held)
	p.shares.giveBytes(in.client, in.held)
	if in.share {
		p.shares.give(in.client)
	}
	if in.slot {
		<-p.sem
		p.wg.Done()
	}
}

// unread marks an answer given before the request's body was read (or
// while it was still coming): the connection closes after it, so
// net/http does not wait to read a body that may never come before it
// answers.
func unread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
}

// tooLarge is the refusal of a request body over MaxBody, in the
// provider's error shape (unread: refused before the body was read).
func (p *Proxy) tooLarge(unread bool) *refusal {
	return &refusal{reason: admit.ReasonTooLarge, status: http.StatusRequestEntityTooLarge, code: "request_too_large", unread: unread,
		message: fmt.Sprintf("retrygate: request body over %d bytes (--max-body)", p.opts.MaxBody)}
}
