package proxy

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore/pgtest"
	"github.com/retrygate/retrygate/rehearse/proxy/metrics"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// flakyLog is a log whose writes fail while it is full (a disk with no
// room: ENOSPC), and take rows again once it is not.
type flakyLog struct {
	rows
	full   atomic.Bool
	refuse atomic.Pointer[string] // a job whose rows it refuses for good
}

func (f *flakyLog) write(rs []ledgerfile.Row) error {
	if f.full.Load() {
		return &writeErr{syscall.ENOSPC}
	}
	if job := f.refuse.Load(); job != nil {
		for i := range rs {
			if rs[i].Job == *job {
				return fmt.Errorf("%w (job %s)", store.ErrDuplicate, rs[i].Job)
			}
		}
	}
	return f.add(rs)
}

type writeErr struct{ err error }

func (e *writeErr) Error() string {
	return "failed to append to log \"rehearsal.log\": " + e.err.Error()
}
func (e *writeErr) Unwrap() error { return e.err }

// durable is a proxy in front of an ok seat, writing to a flakyLog
// through the metrics, as the command wires them.
type durable struct {
	*running
	log *flakyLog
	m   *metrics.Metrics

	mu   sync.Mutex
	lost map[LostReason]int
}

func startDurable(t *testing.T, maxHeld int) *durable {
	t.Helper()
	base, _ := upstreamAt(t, seatserver.OpenAI, okPlan)
	chain := []seat.Config{seatCfg("s", "openai", base)}
	d := &durable{log: &flakyLog{}, lost: map[LostReason]int{}}
	d.m = metrics.New(metrics.Options{Chain: chain})
	d.running = start(t, testPolicy(), chain, func(o *Options) {
		o.Sink = d.m.Sink(d.log.write)
		o.MaxHeld = maxHeld
		o.OnHeld = d.m.Held
		o.OnLost = func(rs []ledgerfile.Row, why LostReason) {
			d.m.Lost(len(rs), string(why))
			d.mu.Lock()
			d.lost[why] += len(rs)
			d.mu.Unlock()
		}
	})
	return d
}

// ask sends n requests naming no job; each is answered 200.
func (d *durable) ask(t *testing.T, n int) {
	t.Helper()
	for range n {
		resp, _ := post(t, d.url+"/v1/chat/completions", sharedBody)
		require.Equal(t, 200, resp.StatusCode)
	}
}

// gatherMetrics parses m's exposition.
func gatherMetrics(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(m.Exposition()))
	require.NoError(t, err)
	return fams
}

// figure is the sum of a metric's series.
func figure(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	fams := gatherMetrics(t, m)
	total := 0.0
	for _, f := range fams {
		if f.GetName() == name {
			for _, x := range f.GetMetric() {
				total += x.GetCounter().GetValue() + x.GetGauge().GetValue()
			}
		}
	}
	return total
}

// lostBy is rows_lost_total of one reason.
func lostBy(t *testing.T, m *metrics.Metrics, why LostReason) float64 {
	t.Helper()
	fams := gatherMetrics(t, m)
	for _, f := range fams {
		if f.GetName() != "retrygate_log_rows_lost_total" {
			continue
		}
		for _, x := range f.GetMetric() {
			for _, l := range x.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == string(why) {
					return x.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// quiet waits until every row the proxy queued has been through a write.
func (d *durable) quiet(t *testing.T) {
	t.Helper()
	q := d.px.q
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.pending) == 0 && q.waiting && len(d.px.sem) == 0
	}, 5*time.Second, ms)
}

// A full disk loses no row: while writes fail the rows wait in memory
// (rows_held, /readyz not ready with the write's error) and answers go
// out; once the disk has room, the next write takes them, in order, with
// its own, and the proxy is ready again. rows_total + rows_lost_total
// is every request answered.
func TestFullDiskRowsResume(t *testing.T) {
	d := startDurable(t, 0)
	d.ask(t, 2)
	d.quiet(t)
	require.Len(t, d.log.all(), 2)

	d.log.full.Store(true)
	d.ask(t, 5)
	d.quiet(t)
	assert.Len(t, d.log.all(), 2, "nothing written while the disk is full")
	assert.Equal(t, 5.0, figure(t, d.m, "retrygate_log_rows_held"))
	err := d.m.Ready(context.Background())
	require.ErrorIs(t, err, syscall.ENOSPC)
	assert.ErrorContains(t, err, "5 rows wait for the log")

	d.log.full.Store(false)
	d.ask(t, 1)
	d.quiet(t)
	got := d.log.all()
	require.Len(t, got, 8, "the held rows are written with the next")
	seen := map[string]bool{}
	for _, r := range got {
		assert.False(t, seen[r.Job], "job %s written twice", r.Job)
		seen[r.Job] = true
	}
	assert.Equal(t, 8.0, figure(t, d.m, "retrygate_log_rows_total"))
	assert.Equal(t, 0.0, figure(t, d.m, "retrygate_log_rows_lost_total"))
	assert.Equal(t, 0.0, figure(t, d.m, "retrygate_log_rows_held"))
	require.NoError(t, d.m.Ready(context.Background()))
	assert.Equal(t, LogCounts{Written: 8}, d.px.Rows())
}

// Rows are held up to MaxHeld: past it the oldest are dropped, counted
// lost (held_limit); the rest are written when the log takes rows again.
// Rows still held when the proxy stops, its last write failing too, are
// counted lost (shutdown). Either way rows_total + rows_lost_total is
// every request answered.
func TestHeldRowsBoundedAndCounted(t *testing.T) {
	d := startDurable(t, 2)
	d.log.full.Store(true)
	d.ask(t, 5)
	d.quiet(t)
	assert.Equal(t, 3.0, lostBy(t, d.m, LostHeldLimit))
	assert.Equal(t, 2.0, figure(t, d.m, "retrygate_log_rows_held"))

	d.log.full.Store(false)
	d.ask(t, 1)
	d.quiet(t)
	assert.Len(t, d.log.all(), 3)
	assert.Equal(t, 3.0, figure(t, d.m, "retrygate_log_rows_total"))
	assert.Equal(t, 6.0, figure(t, d.m, "retrygate_log_rows_total")+figure(t, d.m, "retrygate_log_rows_lost_total"))

	d.log.full.Store(true)
	d.ask(t, 2)
	d.stop()
	assert.Equal(t, 2.0, lostBy(t, d.m, LostShutdown))
	assert.Equal(t, 8.0, figure(t, d.m, "retrygate_log_rows_total")+figure(t, d.m, "retrygate_log_rows_lost_total"))
	assert.Equal(t, LogCounts{Written: 3, Lost: 5}, d.px.Rows())
	d.mu.Lock()
	assert.Equal(t, map[LostReason]int{LostHeldLimit: 3, LostShutdown: 2}, d.lost)
	d.mu.Unlock()
}

// The retry comes without new rows too: held rows are written once the
// log takes them, though no request comes.
func TestHeldRowsRetriedWhileQuiet(t *testing.T) {
	old := retryEvery
	retryEvery = 5 * ms
	t.Cleanup(func() { retryEvery = old })
	d := startDurable(t, 0)
	d.log.full.Store(true)
	d.ask(t, 3)
	d.quiet(t)
	d.log.full.Store(false)
	d.log.wait(t, 3)
	require.Eventually(t, func() bool { return d.m.Ready(context.Background()) == nil }, 5*time.Second, ms)
	assert.Equal(t, 3.0, figure(t, d.m, "retrygate_log_rows_total"))
}

// A PostgreSQL outage loses no row: a named request whose books are out
// of reach gets 503 books_unavailable and a refusal row of its own
// (for_job names the job), and a request naming no job is served, its
// row held; both are written when the database is back. rows_total +
// rows_lost_total is every request answered.
func TestBooksOutageRowsWritten(t *testing.T) {
	own := pgtest.NewServer(t) // skips without .ci/postgres.sh
	ctx := context.Background()
	_, err := pgstore.Init(ctx, own.URL)
	require.NoError(t, err)
	// Retries bounded short: the outage is answered at once.
	st, err := pgstore.Open(ctx, own.URL, pgstore.Options{RetryFor: 200 * ms})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })

	old := retryEvery
	retryEvery = 20 * ms
	t.Cleanup(func() { retryEvery = old })
	base, _ := upstreamAt(t, seatserver.OpenAI, okPlan)
	chain := []seat.Config{seatCfg("s", "openai", base)}
	m := metrics.New(metrics.Options{Chain: chain})
	px := start(t, testPolicy(), chain, func(o *Options) {
		o.Books = m.Books(st)
		o.Sink = m.Sink(func(rs []ledgerfile.Row) error { return st.Append(ctx, rs...) })
		o.OnHeld = m.Held
		o.OnLost = func(rs []ledgerfile.Row, why LostReason) { m.Lost(len(rs), string(why)) }
	})
	url := px.url + "/v1/chat/completions"
	answered := 0
	resp, _ := post(t, url, sharedBody, "X-Retrygate-Job", "before")
	require.Equal(t, 200, resp.StatusCode)
	answered++

	own.Stop()
	for _, job := range []string{"down-1", "down-2"} {
		resp, body := post(t, url, sharedBody, "X-Retrygate-Job", job)
		require.Equal(t, 503, resp.StatusCode, body)
		assert.Equal(t, "books_unavailable", resp.Header.Get("X-Retrygate-Refused"))
		answered++
	}
	resp, _ = post(t, url, sharedBody)
	require.Equal(t, 200, resp.StatusCode, "a request naming no job needs no books")
	answered++
	require.Eventually(t, func() bool { return figure(t, m, "retrygate_log_rows_held") == 3 }, 5*time.Second, ms)
	require.Error(t, m.Ready(ctx))

	own.Start()
	require.Eventually(t, func() bool {
		return figure(t, m, "retrygate_log_rows_total")+figure(t, m, "retrygate_log_rows_lost_total") == float64(answered)
	}, 20*time.Second, 10*ms, "every answer's row written once the database is back")
	assert.Equal(t, 0.0, figure(t, m, "retrygate_log_rows_lost_total"))
	require.NoError(t, m.Ready(ctx))

	rows, err := st.ReadJob(ctx, "")
	require.NoError(t, err)
	forJob := map[string]string{}
	for _, r := range rows {
		kv := map[string]string{}
		for _, x := range r.Extra {
			kv[x.Key] = x.Value
		}
		if v, ok := kv[KeyForJob]; ok {
			forJob[v] = kv[KeyRefused]
			assert.False(t, r.WasSent())
		}
	}
	assert.Equal(t, map[string]string{"down-1": "books_unavailable", "down-2": "books_unavailable"}, forJob)
	assert.Len(t, rows, answered)
}

// A row the log refuses for good (a value it cannot hold, a job and
// attempt it already has) is lost alone, counted (refused); it never
// holds back the rows beside it.
func TestRefusedRowLostAlone(t *testing.T) {
	d := startDurable(t, 0)
	job := "p7-2"
	d.log.refuse.Store(&job)
	d.ask(t, 3)
	d.quiet(t)
	var jobs []string
	for _, r := range d.log.all() {
		jobs = append(jobs, r.Job)
	}
	assert.Equal(t, []string{"p7-1", "p7-3"}, jobs)
	assert.Equal(t, 1.0, lostBy(t, d.m, LostRefused))
	assert.Equal(t, 3.0, figure(t, d.m, "retrygate_log_rows_total")+figure(t, d.m, "retrygate_log_rows_lost_total"))
	require.NoError(t, d.m.Ready(context.Background()))
}
