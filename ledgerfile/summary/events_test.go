package summary

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
)

func spansOf(t *testing.T, log string, since time.Time) []BreakerSpan {
	t.Helper()
	s := New(Options{Since: since})
	_, _, err := ScanEvents(strings.NewReader(log), "b.log", false, func(r *ledgerfile.Row) { s.Add(r, "b.log") }, s.AddEvent, nil)
	require.NoError(t, err)
	return s.Close().Breaker
}

func at(sec int) time.Time { return time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC) }

const (
	sentA  = "ts=2026-01-01T00:00:00Z seat=a wait_s=1 elapsed_s=2 tokens=1 outcome=server_error\n"
	refA5  = "ts=2026-01-01T00:00:05Z seat=a wait_s=0 elapsed_s=0 tokens=0 decision=\"refuse: breaker open\" sent=false\n"
	refA6  = "ts=2026-01-01T00:00:06Z seat=a wait_s=0 elapsed_s=0 tokens=0 decision=\"refuse: breaker open\" sent=false\n"
	sentA9 = "ts=2026-01-01T00:00:09Z seat=a wait_s=1 elapsed_s=1 tokens=1 outcome=ok\n"
	sentB  = "ts=2026-01-01T00:00:20Z seat=b wait_s=1 elapsed_s=10 tokens=1 outcome=ok\n"
)

// The summary's breaker spans come from the log's `# event breaker`
// lines: opening to closing, half-open inside the span, and a breaker
// still open at the log's end runs to its last moment.
func TestBreakerSpansFromEvents(t *testing.T) {
	log := sentA +
		"# event breaker seat=a from=closed to=open ts=2026-01-01T00:00:02Z\n" +
		refA5 +
		"# event breaker seat=a from=open to=half-open ts=2026-01-01T00:00:12Z\n" +
		"# event breaker seat=a from=half-open to=open ts=2026-01-01T00:00:13Z\n" +
		"# event breaker seat=a from=open to=half-open ts=2026-01-01T00:00:23Z\n" +
		"# event breaker seat=a from=half-open to=closed ts=2026-01-01T00:00:24Z\n" +
		"# event breaker seat=b from=closed to=open ts=2026-01-01T00:00:25Z\n" +
		sentB +
		"# event drain seat=a ts=2026-01-01T00:00:26Z\n"
	assert.Equal(t, []BreakerSpan{
		{Seat: "a", From: at(2), To: at(24)},
		{Seat: "b", From: at(25), To: at(30), StillOpen: true},
	}, spansOf(t, log, time.Time{}))
	// --since keeps the spans that reach it, from it.
	assert.Equal(t, []BreakerSpan{
		{Seat: "b", From: at(26), To: at(30), StillOpen: true},
	}, spansOf(t, log, at(26)))
}

// A log without breaker events (hand-written, or older) has its spans
// inferred from the refusals for an open breaker: a run of them on a
// seat, ended by a row sent to it. With events, refusals infer nothing.
func TestBreakerSpansInferredFromRefusals(t *testing.T) {
	log := sentA + refA5 + refA6 + sentA9 + refA6 + "wait_s=0 elapsed_s=0 tokens=0 seat=c decision=refuse: breaker open\n"
	assert.Equal(t, []BreakerSpan{
		{Seat: "a", From: at(5), To: at(6), Inferred: true},
		{Seat: "a", From: at(6), To: at(6), Inferred: true},
	}, spansOf(t, log, time.Time{}), "a row without ts places nothing")

	withEvents := "# event breaker seat=b from=closed to=open ts=2026-01-01T00:00:01Z\n" + log
	assert.Equal(t, []BreakerSpan{
		{Seat: "b", From: at(1), To: at(10), StillOpen: true},
	}, spansOf(t, withEvents, time.Time{}))
}
