package proxy

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"time"
)

// MaxHeaderBytes bounds a request's header block; past it net/http
// answers 431 Request Header Fields Too Large.
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
)

// Serve answers on ln until ctx is done, then drains: no new request is
// taken, requests in flight (streams included) run to their end or their
// hard timeout, every row is written, and every job still open gets the
// row that ends it. errLog gets net/http's own complaints.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener, errLog io.Writer) error {
	hs := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: readHeaderTimeout,
		// A request's headers and body: net/http lifts it once the
		// handler has read the body to its end.
		ReadTimeout:    readHeaderTimeout + bodyTimeout,
		IdleTimeout:    clientIdleTimeout,
		MaxHeaderBytes: MaxHeaderBytes,
		ErrorLog:       log.New(errLog, "proxy: ", 0),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
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
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	p.Close()
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
