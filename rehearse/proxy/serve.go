package proxy

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"
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
	go func() { errc <- srv.Serve(ln) }()
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

// ServeHTTP reads a request's body, bounded by MaxBody (413) and the
// body clock, then serves it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.ProtoMajor != 1: // net/http hands a handler "PRI * HTTP/2.0"
		refusal{status: http.StatusHTTPVersionNotSupported, code: "http_version", message: "retrygate: the proxy speaks HTTP/1.1"}.write(w, p.kind)
		return
	case r.Method == http.MethodConnect:
		refusal{status: http.StatusMethodNotAllowed, code: "method", message: "retrygate: a gateway, not a forward proxy: no CONNECT"}.write(w, p.kind)
		return
	}
	rt := p.route(r)
	if rt.how == servedRefused {
		p.refuseRoute(w, r, rt)
		return
	}
	if r.ContentLength > p.opts.MaxBody {
		p.tooLarge(w) // before reading: an Expect: 100-continue body is never sent
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	body, err := readBody(http.MaxBytesReader(w, r.Body, p.opts.MaxBody), r.ContentLength, p.opts.MaxBody)
	_ = rc.SetReadDeadline(time.Time{}) // the server's own read notices a hang-up from here on
	if err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			p.tooLarge(w)
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			refusal{status: http.StatusRequestTimeout, code: "request_timeout",
				message: "retrygate: the request body took longer than " + bodyTimeout.String()}.write(w, p.kind)
			return
		}
		// The body broke off: the client is gone, nobody to answer.
		panic(http.ErrAbortHandler)
	}
	p.serve(w, r, body, rt)
}
