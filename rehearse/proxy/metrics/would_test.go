package metrics_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/proxy/metrics"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// A shadow proxy's rows count what the policy would have done: refusals
// by reason, retries and failovers by seat; the pass-through's own
// figures count every row as sent.
func TestWouldCounters(t *testing.T) {
	m := metrics.New(metrics.Options{Chain: []seat.Config{{Name: "up", Kind: "openai"}}})
	rows := []ledgerfile.Row{okRow("a"), okRow("b"), okRow("c"), okRow("d")}
	for i, w := range []string{"admit", "retry", "fallback", "refuse: attempt cap"} {
		rows[i].Would, rows[i].Outcome = w, admit.ServerError
	}
	require.NoError(t, m.Sink(func([]ledgerfile.Row) error { return nil })(rows))
	assert.Equal(t, 1.0, counter(t, m, "retrygate_would_refuse_total"))
	assert.Equal(t, 2.0, counter(t, m, "retrygate_would_retry_total"))
	assert.Equal(t, 4.0, counter(t, m, "retrygate_attempts_total"))
	for _, f := range gather(t, m) {
		if f.GetName() == "retrygate_would_refuse_total" {
			require.Len(t, f.GetMetric(), 1)
			assert.Equal(t, "attempt cap", f.GetMetric()[0].GetLabel()[0].GetValue())
		}
	}
}
