package cmd

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"retrygate/ledgerfile"
	"retrygate/rehearse/proxy/metrics"
	"retrygate/rehearse/seatserver"
)

// checkMetricsAddr checks --metrics: host:port, on loopback unless the
// user names another address (which is warned about, as --listen is).
func (o *ProxyOptions) checkMetricsAddr() error {
	if o.Metrics == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(o.Metrics); err != nil {
		return badInput("--metrics: not host:port %q (e.g. 127.0.0.1:9464)", o.Metrics)
	}
	o.MetricsRemote = seatserver.CheckLoopback(o.Metrics) != nil
	return nil
}

// newMetrics is the proxy's metrics, or nil without --metrics; they
// read the rows the log takes and ask the log whether it is writable.
func (o *ProxyOptions) newMetrics(lg *proxyLog) *metrics.Metrics {
	if o.Metrics == "" {
		return nil
	}
	return metrics.New(metrics.Options{Chain: o.Chain, SlowAfter: o.Policy.Retry.SlowServerAfter, Ready: lg.ready})
}

// serveMetrics listens on --metrics (so a taken address fails before the
// run is written) and, once start is called (when the run is in the log,
// just before the proxy serves: /readyz never answers for a log not yet
// written), serves m's /metrics, /healthz and /readyz there until stop
// (called after the proxy has drained, so the last rows are scraped too).
func (o *ProxyOptions) serveMetrics(m *metrics.Metrics, errOut io.Writer) (start, stop func(), err error) {
	if m == nil {
		return func() {}, func() {}, nil
	}
	ln, err := net.Listen("tcp", o.Metrics)
	if err != nil {
		return nil, nil, badInput("--metrics: cannot listen on %q: %v", o.Metrics, unwrapListenErr(err))
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	start = func() { go func() { _ = srv.Serve(ln) }() }
	fmt.Fprintf(errOut, "retrygate: metrics on http://%s/metrics (and /healthz, /readyz)\n", ln.Addr())
	if o.MetricsRemote {
		fmt.Fprintf(errOut, "retrygate: warning: metrics on %s, off loopback: anyone who can reach it reads this proxy's traffic figures\n", ln.Addr())
	}
	return start, func() { _ = srv.Close(); _ = ln.Close() }, nil
}

// breakerLine is the stderr line of a breaker's change of state: the
// log's event line, as an operator reads it.
func breakerLine(errOut io.Writer, ev *ledgerfile.Event) {
	if line, err := ledgerfile.FormatEvent(ev); err == nil {
		fmt.Fprintf(errOut, "retrygate: %s\n", strings.TrimPrefix(line, "# event "))
	}
}

// ready is /readyz's check that the log takes rows: a file log's held
// rows write (a failed write stays failed) and the file opens for
// appending; a PostgreSQL log's database answers and is writable.
func (l *proxyLog) ready(ctx context.Context) error {
	switch rl := l.runLog.(type) {
	case fileRunLog:
		if err := rl.Flush(); err != nil {
			return err
		}
		f, err := os.OpenFile(rl.Path(), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("log %s: %w", rl.Path(), unwrapPathErr(err))
		}
		return f.Close()
	case *dbRunLog:
		lg := rl.l
		if rep, ok := lg.(*reportingLog); ok {
			lg = rep.Log
		}
		if w, ok := lg.(interface{ Writable(context.Context) error }); ok {
			return w.Writable(ctx)
		}
	}
	return nil
}
