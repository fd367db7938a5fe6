package cmd

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/proxy/metrics"
	"github.com/retrygate/retrygate/rehearse/seatserver"
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
func (o *ProxyOptions) newMetrics(lg runLog) *metrics.Metrics {
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
