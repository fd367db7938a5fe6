package cmd

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/proxy"
	"github.com/retrygate/retrygate/rehearse/proxy/metrics"
)

// logWatch tells the operator what happens to the proxy's log: a write
// that fails (once per outage, on stderr), rows held until the log takes
// them again, rows lost (counted by why, each sent attempt's row printed
// on stderr, and an event line in the log once it takes rows again), a
// log reopened at its path; and, at the end, whether every row is in it.
type logWatch struct {
	errOut io.Writer
	name   string // the log, as output names it
	lg     runLog
	m      *metrics.Metrics // nil without --metrics
	now    func() time.Time

	mu       sync.Mutex
	failing  bool                       // a write failed and no write took rows since
	lostBy   map[proxy.LostReason]int64 // rows lost, by why
	unlogged map[proxy.LostReason]int64 // of those, not yet told in the log
}

func (o *ProxyOptions) watchLog(lg runLog, m *metrics.Metrics) *logWatch {
	w := &logWatch{errOut: o.IO.ErrOut, name: logDisplay(o.LogPath), lg: lg, m: m, now: o.Now,
		lostBy: map[proxy.LostReason]int64{}, unlogged: map[proxy.LostReason]int64{}}
	if w.now == nil {
		w.now = time.Now
	}
	lg.onReopen(w.reopened)
	return w
}

// failed is proxy.Options.OnError: said once until the log takes rows again.
func (w *logWatch) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failing {
		return
	}
	w.failing = true
	fmt.Fprintf(w.errOut, "retrygate: proxy: %v (answers still go out; their rows wait in memory and are written when the log takes them again)\n", err)
}

// held is proxy.Options.OnHeld: n rows wait for the log after a write.
func (w *logWatch) held(n int) {
	if w.m != nil {
		w.m.Held(n)
	}
	if n > 0 {
		return
	}
	w.mu.Lock()
	if w.failing {
		w.failing = false
		fmt.Fprintf(w.errOut, "retrygate: proxy: %s takes rows again; the rows held for it are written\n", w.name)
	}
	tell := w.unlogged
	w.unlogged = map[proxy.LostReason]int64{}
	w.mu.Unlock()
	// The log says where its rows went missing, once it can.
	for _, why := range slices.Sorted(maps.Keys(tell)) {
		ev := w.event("lost", string(why), ledgerfile.KV{Key: "rows", Value: strconv.FormatInt(tell[why], 10)})
		if w.lg.event(&ev) != nil {
			w.mu.Lock()
			w.unlogged[why] += tell[why]
			w.mu.Unlock()
		}
	}
}

// lost is proxy.Options.OnLost: rows that will never be in the log.
func (w *logWatch) lost(rows []ledgerfile.Row, why proxy.LostReason) {
	if w.m != nil {
		w.m.Lost(len(rows), string(why))
	}
	w.mu.Lock()
	w.lostBy[why] += int64(len(rows))
	w.unlogged[why] += int64(len(rows))
	w.mu.Unlock()
	fmt.Fprintf(w.errOut, "retrygate: proxy: %d %s never reached %s (%s); the sent attempts' rows follow\n",
		len(rows), plural(len(rows), "row", "rows"), w.name, lostWords[why])
	for i := range rows {
		if rows[i].WasSent() {
			fmt.Fprintf(w.errOut, "%s\n", ledgerfile.FormatRow(&rows[i]))
		}
	}
}

var lostWords = map[proxy.LostReason]string{
	proxy.LostHeldLimit: "more rows were held for it than --max-held",
	proxy.LostShutdown:  "the proxy stopped while they were held, and the last write failed too",
	proxy.LostRefused:   "the log refused them for good",
}

// reopened is the file writer's OnReopen: the log's path named another
// file, which is opened in its place. Its event line heads the rows
// written there.
func (w *logWatch) reopened(why string) string {
	if w.m != nil {
		w.m.Reopened()
	}
	fmt.Fprintf(w.errOut, "retrygate: warning: proxy: log %s was %s under the proxy; its rows go to the file at that path from now on\n", w.name, why)
	ev := w.event("reopened", why)
	line, err := ledgerfile.FormatEvent(&ev)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(line, "# ")
}

func (w *logWatch) event(what, why string, more ...ledgerfile.KV) ledgerfile.Event {
	return ledgerfile.Event{Kind: ledgerfile.EventLog, TS: w.now(),
		Extra: append([]ledgerfile.KV{{Key: "what", Value: what}, {Key: "reason", Value: why}}, more...)}
}

// stopped is the proxy's last line: every row in the log, or how many
// never reached it (exit 1).
func (w *logWatch) stopped(c proxy.LogCounts) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	leased := ""
	if c.InLease > 0 {
		leased = fmt.Sprintf("; %d %s whose books were out of reach after the attempt wait in their jobs' leases, written by the next proxy to sweep the books once each lease expires",
			c.InLease, plural(int(c.InLease), "attempt's row", "attempts' rows"))
	}
	if c.Lost == 0 {
		if leased != "" {
			fmt.Fprintf(w.errOut, "retrygate: proxy stopped; every other row is in %s%s\n", w.name, leased)
			return nil
		}
		fmt.Fprintf(w.errOut, "retrygate: proxy stopped; every row is in %s\n", w.name)
		return nil
	}
	var by []string
	for _, why := range slices.Sorted(maps.Keys(w.lostBy)) {
		by = append(by, fmt.Sprintf("%d %s", w.lostBy[why], why))
	}
	return &exitError{Code: ExitRefuse, Err: fmt.Errorf("proxy stopped; %d %s never reached %s (%s): every other row is in it%s",
		c.Lost, plural(int(c.Lost), "row", "rows"), w.name, strings.Join(by, ", "), leased)}
}
