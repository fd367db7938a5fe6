package summary

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

func summarizeLog(t *testing.T, log string, opts Options) *Summary {
	t.Helper()
	s := New(opts)
	_, _, err := Scan(strings.NewReader(log), "t.log", false, func(r *ledgerfile.Row) { s.Add(r, "t.log") })
	require.NoError(t, err)
	return s.Close()
}

// A job is every row that shares its id: a row after the job's job_end
// row is still that job's, not a second job.
func TestRowsAfterJobEndAreTheSameJob(t *testing.T) {
	sum := summarizeLog(t, `job=j attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=1000 outcome=ok job_end=succeeded
job=j attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=1000 outcome=ok job_end=succeeded
`, Options{})
	all := sum.All
	assert.Equal(t, int64(1), all.Jobs)
	assert.Equal(t, int64(1), all.Succeeded)
	assert.Equal(t, Figure(2), all.AttemptsPerSuccess)
	assert.Equal(t, int64(1000), all.RetryTax.Tokens, "the first answer was not the one kept")
	assert.Equal(t, int64(1), sum.Jobs.Jobs)
}

// Jobs are the distinct job ids while their rows come close together; a
// row that comes more than endWindow job ends after its job's end starts
// a job of its own (its job was counted and forgotten, as the reader
// forgets it: memory follows the open jobs, not the log).
func TestJobsAreDistinctIDs(t *testing.T) {
	var b strings.Builder
	b.WriteString("job=first attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=server_error job_end=failed\n")
	for i := range 50 {
		fmt.Fprintf(&b, "job=j%d attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded\n", i)
	}
	b.WriteString("job=first attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded\n")
	sum := summarizeLog(t, b.String(), Options{})
	assert.Equal(t, int64(51), sum.All.Jobs)
	assert.Equal(t, int64(51), sum.All.Succeeded, "the late answer rejoins its job")
	assert.Equal(t, int64(0), sum.All.Failed)
	assert.Equal(t, int64(52), sum.All.Attempts)

	b.Reset()
	b.WriteString("job=first attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=server_error job_end=failed\n")
	for i := range endWindow + 1 {
		fmt.Fprintf(&b, "job=j%d attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded\n", i)
	}
	b.WriteString("job=first attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded\n")
	sum = summarizeLog(t, b.String(), Options{})
	assert.Equal(t, int64(endWindow+3), sum.All.Jobs, "the late row is a job of its own")
	assert.Equal(t, sum.All.Jobs, sum.All.Succeeded+sum.All.Failed)
	assert.Equal(t, int64(endWindow+3), sum.All.Attempts)
}

// goodput's jobs and end states are the summary's: a job with no job_end
// row (record writes none) that succeeded is a good job.
func TestGoodputCountsJobsWithoutJobEnd(t *testing.T) {
	sum := summarizeLog(t, `ts=2026-03-14T09:00:00Z job=a attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok decision=admit
ts=2026-03-14T09:00:01Z job=b attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=server_error decision=admit
ts=2026-03-14T09:00:04Z job=b attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok decision=admit
`, Options{Goodput: true})
	require.NotNil(t, sum.Goodput)
	assert.Equal(t, int64(2), sum.Goodput.Jobs)
	assert.Equal(t, int64(2), sum.Goodput.Good)
	assert.Equal(t, 6.0, sum.Goodput.WindowS)
}

// The replay keeps a job's books past its job_end row for a row of it
// that follows: the gate judges that row with the job's attempts used.
func TestReplayGoesOnPastJobEnd(t *testing.T) {
	c, err := NewCheck(CheckOptions{Budget: admit.Budget{Deadline: time.Minute, TokenCeiling: 8000, MaxAttempts: 1, MaxWait: 5 * time.Second},
		Thresholds: []Threshold{{Threshold: mustThreshold(t, "refused_rate", "rate <= 100%")}}})
	require.NoError(t, err)
	_, _, err = Scan(strings.NewReader(`job=j attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok decision=admit used=0 job_end=succeeded
job=j attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=10 decision="refuse: attempt cap" sent=false
job=k attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok decision=admit used=0 job_end=succeeded
`), "t.log", false, func(r *ledgerfile.Row) { c.Add(r, "t.log") })
	require.NoError(t, err)
	res := c.Close()
	assert.Zero(t, res.ChangesTotal, "%+v", res.Changes)
	assert.Equal(t, int64(2), res.Summary.All.Jobs)
	assert.Equal(t, 1.0/3, *res.Thresholds[0].Observed)
}

func mustThreshold(t *testing.T, metric, expr string) admit.Threshold {
	t.Helper()
	th, err := admit.ParseThreshold(metric, expr)
	require.NoError(t, err)
	return th
}

// An incomplete answer (the Responses API's status incomplete) is an
// outcome of its own: counted as such, its wait a real first content
// byte, a billed failure, and a job that ends on it (without a job_end)
// failed, not unknown nor cancelled.
func TestIncompleteIsItsOwnOutcome(t *testing.T) {
	sum := summarizeLog(t, `job=j attempt=1 seat=s wait_s=0.5 elapsed_s=2 tokens=1200 outcome=incomplete billing=billable error_code=max_output_tokens
job=k attempt=1 seat=s wait_s=0.5 elapsed_s=2 tokens=1200 outcome=ok
`, Options{})
	all := sum.All
	assert.Equal(t, int64(1), all.Outcomes[string(admit.Incomplete)])
	assert.Equal(t, int64(0), all.Outcomes[string(admit.Cancelled)], "not counted with the outcomes the log does not define")
	assert.Equal(t, int64(1), all.Failed)
	assert.Equal(t, int64(0), all.Unknown)
	assert.Equal(t, int64(1), all.BilledFailures)
	assert.True(t, ProducedContent(&ledgerfile.Row{Outcome: admit.Incomplete, Wait: time.Second, Elapsed: 2 * time.Second}))
}
