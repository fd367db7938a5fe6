package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/rehearse/proxy/metrics"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// retryingBooks runs fn twice, as a store whose transaction was retried,
// and then commits, or fails with err.
type retryingBooks struct{ err error }

func (b retryingBooks) Book(_ context.Context, _ string, fn func([]byte, time.Time) (store.Record, []ledgerfile.Row, error)) error {
	for range 2 {
		if _, _, err := fn(nil, time.Now()); err != nil {
			return err
		}
	}
	return b.err
}

func (b retryingBooks) BookShared(_ context.Context, _, _ string, fn func([]byte, []byte, time.Time) (store.Record, []byte, []ledgerfile.Row, error)) error {
	for range 2 {
		if _, _, _, err := fn(nil, nil, time.Now()); err != nil {
			return err
		}
	}
	return b.err
}

func (retryingBooks) Due(context.Context, int) ([]string, error) { return nil, nil }

func okRow(job string) ledgerfile.Row {
	return ledgerfile.Row{Job: job, Attempt: 1, Seat: "up", Outcome: admit.OK, Billing: admit.Billable, Decision: "admit", HasSpent: true}
}

func counter(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	total := 0.0
	for _, f := range gather(t, m) {
		if f.GetName() == name {
			for _, x := range f.GetMetric() {
				total += x.GetCounter().GetValue()
			}
		}
	}
	return total
}

// TestBooksCountCommittedRowsOnce: a shared book's rows count once when
// the store commits them, however often it ran fn, and not at all when
// it failed (they are not in the log, and not lost: see below); readiness
// follows the writes.
func TestBooksCountCommittedRowsOnce(t *testing.T) {
	m := metrics.New(metrics.Options{Chain: []seat.Config{{Name: "up", Kind: "openai"}}})
	rows := func([]byte, time.Time) (store.Record, []ledgerfile.Row, error) {
		return store.Record{}, []ledgerfile.Row{okRow("j1")}, nil
	}
	require.NoError(t, m.Books(retryingBooks{}).Book(context.Background(), "j1", rows))
	assert.Equal(t, 1.0, counter(t, m, "retrygate_log_rows_total"))
	assert.Equal(t, 1.0, counter(t, m, "retrygate_attempts_total"))
	// A decision under the shared retry budget commits its rows the same way.
	shared := func(_, _ []byte, _ time.Time) (store.Record, []byte, []ledgerfile.Row, error) {
		return store.Record{}, nil, []ledgerfile.Row{okRow("j0")}, nil
	}
	require.NoError(t, m.Books(retryingBooks{}).BookShared(context.Background(), "j0", "retry budget", shared))
	assert.Equal(t, 2.0, counter(t, m, "retrygate_log_rows_total"))
	assert.Equal(t, 2.0, counter(t, m, "retrygate_attempts_total"))
	require.NoError(t, m.Ready(context.Background()))

	down := errors.New("postgres db: server unreachable")
	require.ErrorIs(t, m.Books(retryingBooks{err: down}).Book(context.Background(), "j2", rows), down)
	assert.Equal(t, 2.0, counter(t, m, "retrygate_log_rows_total"))
	// Not lost either: a step whose book failed writes its refusal's row
	// through the proxy's writer, and an attempt in flight is written from
	// its lease (rehearse/proxy: TestBooksOutageRowsWritten).
	assert.Equal(t, 0.0, counter(t, m, "retrygate_log_rows_lost_total"))
	assert.Equal(t, 2.0, counter(t, m, "retrygate_attempts_total"))
	assert.ErrorIs(t, m.Ready(context.Background()), down)

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "server unreachable")
	code, _ = get("/healthz")
	assert.Equal(t, http.StatusOK, code, "the process serves, the log or not")

	// A write that takes its rows makes the proxy ready again.
	require.NoError(t, m.Sink(func([]ledgerfile.Row) error { return nil })([]ledgerfile.Row{okRow("j3")}))
	code, _ = get("/readyz")
	assert.Equal(t, http.StatusOK, code)
	assert.Nil(t, m.Books(nil), "no shared books: none to wrap")
}

// TestReadyAsksTheLog: /readyz fails while Options.Ready does.
func TestReadyAsksTheLog(t *testing.T) {
	var fail error
	m := metrics.New(metrics.Options{Ready: func(ctx context.Context) error {
		_, ok := ctx.Deadline()
		assert.True(t, ok, "the check is bounded")
		return fail
	}})
	require.NoError(t, m.Ready(context.Background()))
	fail = errors.New("log rehearsal.log: no such file or directory")
	require.ErrorIs(t, m.Ready(context.Background()), fail)
}
