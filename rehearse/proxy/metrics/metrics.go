// Package metrics is the proxy's Prometheus endpoint (`proxy --metrics`):
// counters and histograms taken from the very rows and breaker events the
// proxy writes to its log, so a scrape agrees with `report` on that log.
package metrics

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// Bounds on the label values a client can choose: past them a value
// counts as Other (the OpenTelemetry conventions' fallback value), so
// the number of series stays bounded whatever the traffic.
const (
	maxModels  = 32
	maxReasons = 32
	// maxJobs is how many jobs' kept answers (for the retry tax) and
	// fallbacks are remembered; an older job's late row counts as a new
	// job's (report's own window, summary's endWindow, is 16384 ended jobs).
	maxJobs = 1 << 16
	// Other is a label value past its bound.
	Other = "_OTHER"
)

// The OpenTelemetry GenAI conventions' bucket boundaries.
var (
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// Options build Metrics.
type Options struct {
	// Chain is the proxy's seats: their names label the series, their
	// kinds are gen_ai_provider_name.
	Chain []seat.Config
	// SlowAfter classifies a row that carries no billing key, as report's
	// --slow-after does (the proxy's rows always carry one).
	SlowAfter time.Duration
	// Ready is /readyz's check that the log can take rows (nil: none).
	Ready func(context.Context) error
}

// Metrics counts the rows and events a proxy writes. Feed it through
// Sink and Books (the two ways the proxy's rows reach the log) and
// Breaker; serve Handler.
type Metrics struct {
	kinds map[string]string // seat → provider
	slow  time.Duration
	ready func(context.Context) error

	lastErr atomic.Pointer[error] // the last write's failure; nil after a good one
	held    atomic.Int64          // rows waiting for the log (a failed write's)
	probing atomic.Bool           // a check of the log (Options.Ready) has not returned

	mu                              sync.Mutex // the families, and what follows
	families                        []*family
	duration, ttfc, tokens          *family
	decisions, attempts, retries    *family
	costUSD, taxUSD, taxTokens      *family
	fallbacks                       *family
	wouldRefuse, wouldRetry         *family
	breakerState                    *family
	transitions                     *family
	rowsLost                        *family
	rowsWritten, writeErrs, reopens *series
	rowsHeld                        *series
	models                          map[string]bool
	reasons                         map[string]bool
	jobs                            map[string]*jobMemo
	ring                            []string // jobs' ids in the order first remembered, for eviction
	head                            int
}

// jobMemo is what a job's later rows need of its earlier ones: its kept
// answer (report's: the ok attempt of the highest number), whose cost
// becomes retry tax when a later answer replaces it, and whether it
// already fell back.
type jobMemo struct {
	kept        bool
	keptAttempt int
	keptSeat    string
	keptUSD     float64
	keptTokens  int64
	fallback    bool
}

// New builds the metrics; a scrape adds the Go runtime's and the
// process's figures (runtime.go).
func New(o Options) *Metrics {
	m := &Metrics{
		kinds: map[string]string{}, slow: o.SlowAfter, ready: o.Ready,
		models: map[string]bool{}, reasons: map[string]bool{}, jobs: map[string]*jobMemo{},
	}
	for _, s := range o.Chain {
		m.kinds[s.Name] = s.Kind
	}
	add := func(kind familyKind, name, help string, buckets []float64, labels ...string) *family {
		f := newFamily(kind, name, help, buckets, labels...)
		m.families = append(m.families, f)
		return f
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *family {
		return add(histogramKind, name, help, buckets, labels...)
	}
	counter := func(name, help string, labels ...string) *family {
		return add(counterKind, name, help, nil, labels...)
	}
	genAI := []string{"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "seat"}
	m.duration = histogram("gen_ai_client_operation_duration_seconds",
		"Sent attempts' elapsed_s (submit to last byte, or to the cut-off), as logged; error_type is the outcome when not ok.",
		durationBuckets, append(genAI, "error_type")...)
	m.ttfc = histogram("gen_ai_client_operation_time_to_first_chunk_seconds",
		"Sent attempts' wait_s (submit to the first chunk carrying content), over attempts whose answer started.",
		durationBuckets, genAI...)
	m.tokens = histogram("gen_ai_client_token_usage",
		"Sent attempts' prompt_tokens (input) and completion_tokens (output), over rows with the split.",
		tokenBuckets, append(genAI, "gen_ai_token_type")...)
	m.decisions = counter("retrygate_decisions_total",
		"Rows by the gate's decision: admit (sent), or refuse with its reason (not sent; a live wait-cap cut is sent and counts as admit).",
		"decision", "reason")
	m.attempts = counter("retrygate_attempts_total", "Sent attempts by seat, outcome and billing class.", "seat", "outcome", "billing")
	m.retries = counter("retrygate_retries_total", "Sent attempts after their job's first sent attempt (used >= 1).", "seat")
	m.costUSD = counter("retrygate_cost_usd_total", "Σ cost_usd of sent attempts on priced seats; rate() is the spend per second.", "seat")
	m.taxUSD = counter("retrygate_retry_tax_usd_total", "Σ cost_usd of sent attempts that are not their job's kept answer (report's retry tax).", "seat")
	m.taxTokens = counter("retrygate_retry_tax_tokens_total", "Σ tokens of sent attempts that are not their job's kept answer.", "seat")
	m.fallbacks = counter("retrygate_fallback_activations_total", "Jobs whose first row on a fallback seat this is, by that seat (report's fallback jobs).", "seat")
	m.wouldRefuse = counter("retrygate_would_refuse_total",
		"Shadow rows (proxy --shadow) the policy would have refused, by reason: requests enforcing would have answered itself.", "reason")
	m.wouldRetry = counter("retrygate_would_retry_total",
		"Shadow rows whose attempt the policy would have retried (move=retry) or sent to a fallback seat (move=fallback), by seat.", "seat", "move")
	m.breakerState = add(gaugeKind, "retrygate_breaker_state", "1 for the state each seat's circuit breaker is in (closed, open, half-open), 0 for the others.", nil, "seat", "state")
	m.transitions = counter("retrygate_breaker_transitions_total", "Circuit-breaker changes of state, as the log's # event breaker lines.", "seat", "from", "to")
	m.rowsWritten = counter("retrygate_log_rows_total", "Rows the log took; every other retrygate_ figure counts these rows.").with()
	m.rowsLost = counter("retrygate_log_rows_lost_total",
		"Rows that never reached the log, by why: held_limit (held past --max-held while the log refused writes), shutdown (still held when the proxy stopped), refused (the log refused the row itself, for good). Counted in no other figure.",
		"reason")
	m.rowsHeld = add(gaugeKind, "retrygate_log_rows_held", "Rows a failed write left in memory, written first by the next write.", nil).with()
	m.writeErrs = counter("retrygate_log_write_errors_total", "Writes to the log that failed (their rows are held, not lost).").with()
	m.reopens = counter("retrygate_log_reopens_total", "Times the log's path named another file than the one open (removed or replaced) and was opened again.").with()
	for _, why := range []string{"held_limit", "shutdown", "refused"} {
		m.rowsLost.with(why)
	}
	// Every seat's series from the start, so rate() has a zero to start from.
	m.decisions.with("admit", "")
	for _, s := range o.Chain {
		m.retries.with(s.Name)
		m.taxTokens.with(s.Name)
		m.fallbacks.with(s.Name)
		if s.Priced() {
			m.costUSD.with(s.Name)
			m.taxUSD.with(s.Name)
		}
		m.setBreaker(s.Name, admit.Closed)
	}
	return m
}

// Sink wraps the proxy's row sink (proxy.Options.Sink): the rows a
// write took are counted, those of a failed write are not (they are not
// in the log).
func (m *Metrics) Sink(write func([]ledgerfile.Row) error) func([]ledgerfile.Row) error {
	return func(rows []ledgerfile.Row) error {
		err := write(rows)
		m.wrote(rows, err)
		return err
	}
}

// Books wraps the shared books (proxy.Options.Books), which append a
// decision's rows with the job's record: the rows of a Book that
// committed are counted once, however often the store ran fn. Nil stays
// nil.
func (m *Metrics) Books(b store.Books) store.Books {
	if b == nil {
		return nil
	}
	return countingBooks{b, m}
}

type countingBooks struct {
	store.Books
	m *Metrics
}

func (c countingBooks) Book(ctx context.Context, key string, fn func(old []byte, now time.Time) (store.Record, []ledgerfile.Row, error)) error {
	var rows []ledgerfile.Row
	err := c.Books.Book(ctx, key, func(old []byte, now time.Time) (store.Record, []ledgerfile.Row, error) {
		rec, rs, err := fn(old, now)
		rows = rs // the last run's rows are the ones committed
		return rec, rs, err
	})
	if len(rows) > 0 || err != nil {
		c.m.wrote(rows, err)
	}
	return err
}

// BookShared is Book with the shared record (the retry budget's): its
// committed rows are counted alike.
func (c countingBooks) BookShared(ctx context.Context, key, shared string, fn func(old, sharedOld []byte, now time.Time) (store.Record, []byte, []ledgerfile.Row, error)) error {
	var rows []ledgerfile.Row
	err := c.Books.BookShared(ctx, key, shared, func(old, sharedOld []byte, now time.Time) (store.Record, []byte, []ledgerfile.Row, error) {
		rec, sh, rs, err := fn(old, sharedOld, now)
		rows = rs // the last run's rows are the ones committed
		return rec, sh, rs, err
	})
	if len(rows) > 0 || err != nil {
		c.m.wrote(rows, err)
	}
	return err
}

// wrote counts a write: a failed one's rows are not lost yet (the proxy
// holds them for the next write: see Lost and Held).
func (m *Metrics) wrote(rows []ledgerfile.Row, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.lastErr.Store(&err)
		m.writeErrs.inc()
		return
	}
	m.lastErr.Store(nil)
	for i := range rows {
		m.row(&rows[i])
	}
	m.rowsWritten.add(float64(len(rows)))
}

// Lost counts n rows that will never reach the log, and why
// (proxy.Options.OnLost).
func (m *Metrics) Lost(n int, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rowsLost.with(why).add(float64(n))
}

// Held is how many rows wait for the log now (proxy.Options.OnHeld):
// while any do, the proxy is not ready.
func (m *Metrics) Held(n int) {
	m.held.Store(int64(n))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rowsHeld.set(float64(n))
}

// Reopened counts the log opened again by its path.
func (m *Metrics) Reopened() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reopens.inc()
}

// row counts one row the log took (under m.mu), by the summary's own
// rules: a refusal is a row not sent, counted by its reason; everything
// else is a sent attempt's.
func (m *Metrics) row(r *ledgerfile.Row) {
	memo := m.memo(r)
	s, provider := m.seat(r.Seat)
	if r.Fallback && !memo.fallback {
		memo.fallback = true
		m.fallbacks.with(s).inc()
	}
	switch {
	case r.Would == ledgerfile.WouldRetry || r.Would == ledgerfile.WouldFallback:
		m.wouldRetry.with(s, r.Would).inc()
	case r.Would != "" && r.Would != "admit":
		d, _ := admit.ParseDecision(r.Would)
		m.wouldRefuse.with(bounded(m.reasons, maxReasons, string(d.Reason))).inc()
	}
	if !r.WasSent() {
		m.decisions.with("refuse", bounded(m.reasons, maxReasons, summary.RefusalReason(r))).inc()
		return
	}
	m.decisions.with("admit", "").inc()
	outcome := summary.RowOutcome(r)
	m.attempts.with(s, string(outcome), string(summary.RowBilling(r, m.slow))).inc()
	if r.HasSpent && r.Used > 0 {
		m.retries.with(s).inc()
	}
	if r.HasCost {
		m.costUSD.with(s).add(r.CostUSD)
	}
	m.tax(r, s, outcome, memo)

	model := bounded(m.models, maxModels, r.Model)
	op := "chat"
	errType := ""
	if outcome != admit.OK {
		errType = string(outcome)
	}
	m.duration.with(op, provider, model, s, errType).observe(durationBuckets, summary.Seconds(r.Elapsed))
	if summary.ProducedContent(r) {
		m.ttfc.with(op, provider, model, s).observe(durationBuckets, summary.Seconds(r.Wait))
	}
	if r.HasSplit {
		m.tokens.with(op, provider, model, s, "input").observe(tokenBuckets, float64(r.PromptTokens))
		m.tokens.with(op, provider, model, s, "output").observe(tokenBuckets, float64(r.CompletionTokens))
	}
}

// tax is report's retry tax, as a counter: a sent attempt that is not
// its job's kept answer (the ok attempt of the highest number) is tax;
// a kept answer a later-numbered ok attempt replaces becomes tax then.
func (m *Metrics) tax(r *ledgerfile.Row, s string, outcome admit.Outcome, memo *jobMemo) {
	add := func(seat string, usd float64, tokens int64, priced bool) {
		if priced {
			m.taxUSD.with(seat).add(usd)
		}
		m.taxTokens.with(seat).add(float64(tokens))
	}
	switch {
	case outcome != admit.OK:
		add(s, r.CostUSD, r.Tokens, r.HasCost)
	case memo.kept && r.Attempt <= memo.keptAttempt:
		add(s, r.CostUSD, r.Tokens, r.HasCost)
	default:
		if memo.kept {
			add(memo.keptSeat, memo.keptUSD, memo.keptTokens, memo.keptUSD != 0)
		}
		memo.kept, memo.keptAttempt, memo.keptSeat = true, r.Attempt, s
		memo.keptUSD, memo.keptTokens = r.CostUSD, r.Tokens
	}
}

// memo is the job's memo, remembered (the oldest forgotten past
// maxJobs); a row with no job id is a job of its own.
func (m *Metrics) memo(r *ledgerfile.Row) *jobMemo {
	if r.Job == "" {
		return &jobMemo{}
	}
	if j, ok := m.jobs[r.Job]; ok {
		return j
	}
	j := &jobMemo{}
	if len(m.ring) < maxJobs {
		m.ring = append(m.ring, r.Job)
	} else {
		delete(m.jobs, m.ring[m.head])
		m.ring[m.head] = r.Job
		m.head = (m.head + 1) % maxJobs
	}
	m.jobs[r.Job] = j
	return j
}

// Breaker counts one change of a seat's breaker (proxy.Options.OnBreaker).
func (m *Metrics) Breaker(seat string, _ time.Time, from, to admit.BreakerState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, _ := m.seat(seat)
	m.transitions.with(s, from.String(), to.String()).inc()
	m.setBreaker(s, to)
}

func (m *Metrics) setBreaker(seat string, to admit.BreakerState) {
	for _, st := range []admit.BreakerState{admit.Closed, admit.Open, admit.HalfOpen} {
		v := 0.0
		if st == to {
			v = 1
		}
		m.breakerState.with(seat, st.String()).set(v)
	}
}

// seat is a row's seat label and its provider: Other for a seat not in
// the chain.
func (m *Metrics) seat(s string) (label, provider string) {
	if k, ok := m.kinds[s]; ok {
		return s, k
	}
	return Other, Other
}

// bounded is v while seen holds fewer than limit values, or v is one of
// them; Other past that.
func bounded(seen map[string]bool, limit int, v string) string {
	if seen[v] {
		return v
	}
	if len(seen) >= limit {
		return Other
	}
	seen[v] = true
	return v
}

// Handler serves /metrics (Prometheus text), /healthz (the process
// answers) and /readyz (the log takes rows: the last write did and
// Options.Ready passes).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", m.serveMetrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := m.Ready(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// serveMetrics writes the exposition (gzipped when the scraper asks),
// as client_golang's handler did.
func (m *Metrics) serveMetrics(w http.ResponseWriter, r *http.Request) {
	body := m.Exposition()
	h := w.Header()
	h.Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8; escaping=underscores")
	h.Add("Vary", "Accept")
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		z := gzip.NewWriter(w)
		_, _ = z.Write(body)
		_ = z.Close()
		return
	}
	_, _ = w.Write(body)
}

func acceptsGzip(accept string) bool {
	for part := range strings.SplitSeq(accept, ",") {
		enc, _, _ := strings.Cut(part, ";")
		if strings.TrimSpace(enc) == "gzip" {
			return true
		}
	}
	return false
}

// Exposition is the Prometheus text of every family now: the proxy's,
// the Go runtime's and the process's, by name.
func (m *Metrics) Exposition() []byte {
	fams := runtimeFamilies()
	m.mu.Lock()
	defer m.mu.Unlock()
	fams = append(fams, m.families...)
	slices.SortFunc(fams, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	var b []byte
	for _, f := range fams {
		b = f.write(b)
	}
	return b
}

// readyTimeout bounds /readyz's check of the log.
const readyTimeout = 2 * time.Second

// Ready is /readyz's verdict: nil when the last write to the log took
// its rows, none wait for it, and Options.Ready passes within
// readyTimeout. The check runs apart, one at a time: a probe never
// waits past the timeout, whatever the log's path has become, and
// probes that come while a check hangs start no other.
func (m *Metrics) Ready(ctx context.Context) error {
	if p := m.lastErr.Load(); p != nil {
		if n := m.held.Load(); n > 0 {
			return fmt.Errorf("%d rows wait for the log: %w", n, *p)
		}
		return *p
	}
	if m.ready == nil {
		return nil
	}
	if !m.probing.CompareAndSwap(false, true) {
		return errors.New("the last check of the log has not returned")
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		defer m.probing.Store(false)
		done <- m.ready(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("the check of the log took over %s", readyTimeout)
	}
}
