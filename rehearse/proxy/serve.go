package proxy

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"time"
)

// MaxHeaderBytes bounds a request's header block; past it the server
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
// row that ends it. errLog gets the server's own complaints (accept errors, a panic).
func (p *Proxy) Serve(ctx context.Context, ln net.Listener, errLog io.Writer) error {
	srv := newServer(p, log.New(errLog, "proxy: ", 0))
	errc := make(chan error, 1)
	go func() { errc <- srv.serve(ln) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			srv.closeAll()
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
	_ = srv.shutdown(sctx)
	p.Close()
	if err := <-errc; err != nil && !errors.Is(err, errServerClosed) {
		return err
	}
	return nil
}
