package summary

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// The pictures' buckets count rows as the tables do: a sent attempt the
// wait cap cut live is sent (it counts under its outcome), and a refusal
// is a row not sent, by its reason. The timeline's jobs end as the
// summary ends them.
func TestDrawingCountsAsTheTables(t *testing.T) {
	s := summarizeLog(t, `ts=2026-01-01T00:00:00Z job=a attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok decision=admit
ts=2026-01-01T00:00:01Z job=b attempt=1 seat=s wait_s=6 elapsed_s=6 tokens=10 outcome=wait_cap billing=ambiguous decision="refuse: queue wait"
ts=2026-01-01T00:00:08Z job=b attempt=2 seat=s wait_s=6 elapsed_s=6 tokens=10 decision="refuse: attempt cap" sent=false
`, Options{Draw: true})
	d := s.Drawing
	require.NotNil(t, d)
	var sent int64
	refused := map[string]int64{}
	for _, b := range d.Buckets {
		sent += b.Sent
		for i, n := range b.Refused {
			if n > 0 {
				refused[string(admit.Reasons[i])] += n
			}
		}
	}
	assert.Equal(t, s.All.Attempts, sent, "the live cut was sent")
	assert.Equal(t, map[string]int64{"attempt cap": 1}, refused)
	assert.Equal(t, s.All.Refusals, refused)
	require.Len(t, d.Timeline, 2)
	assert.Equal(t, "b", d.Timeline[0].ID, "a job that did not succeed leads")
	assert.Equal(t, "unknown", d.Timeline[0].End, "ended as the summary ends it: judged by its last sent attempt")
	assert.Equal(t, int64(1), s.All.Unknown)
}
