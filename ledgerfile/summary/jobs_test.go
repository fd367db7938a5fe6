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

// A job is every row of its id within one log, however many other jobs
// come and end between its rows (DESIGN.md, "A job, exactly").
func TestJobsAreDistinctIDs(t *testing.T) {
	for _, between := range []int{50, 20_000} {
		var b strings.Builder
		b.WriteString("job=first attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=server_error job_end=failed\n")
		for i := range between {
			fmt.Fprintf(&b, "job=j%d attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded\n", i)
		}
		b.WriteString("job=first attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded\n")
		sum := summarizeLog(t, b.String(), Options{})
		assert.Equal(t, int64(between+1), sum.All.Jobs)
		assert.Equal(t, int64(between+1), sum.All.Succeeded, "the late answer rejoins its job")
		assert.Equal(t, int64(0), sum.All.Failed)
		assert.Equal(t, int64(between+2), sum.All.Attempts)
		assert.Equal(t, int64(10), sum.All.RetryTax.Tokens, "first's first attempt")
	}
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

// The same job id in two logs is two jobs: rehearse's r<N>-<k> ids are
// unique within one log only. Two copies of one log give twice its jobs
// and the same attempts per success.
func TestSameIDInTwoLogsIsTwoJobs(t *testing.T) {
	const log = `job=r1-1 attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=server_error
job=r1-1 attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded
job=r1-2 attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=timeout billing=ambiguous
job=r1-2 attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=ok job_end=succeeded
job=r1-3 attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=10 outcome=client_error job_end=failed
`
	one := summarizeLog(t, log, Options{})
	s := New(Options{})
	for _, name := range []string{"a.log", "b.log"} {
		_, _, err := Scan(strings.NewReader(log), name, false, func(r *ledgerfile.Row) { s.Add(r, name) })
		require.NoError(t, err)
	}
	two := s.Close()
	assert.Equal(t, int64(3), one.All.Jobs)
	assert.Equal(t, 2*one.All.Jobs, two.All.Jobs)
	assert.Equal(t, 2*one.All.Succeeded, two.All.Succeeded)
	assert.Equal(t, 2*one.Jobs.Jobs, two.Jobs.Jobs)
	assert.Equal(t, one.All.AttemptsPerSuccess, two.All.AttemptsPerSuccess, "5 attempts for 2 answers in each log")
	assert.Equal(t, 2*one.All.RetryTax.Tokens, two.All.RetryTax.Tokens)
}

// A job whose rows lack job_end ends as the writer would have ended it:
// judged by its last sent attempt (admit.Track.End), whatever refusal
// comes after it. The demo's job: a reset, a wait-cap cut, then the
// attempt cap refuses: unknown, not failed.
func TestJobWithoutJobEndEndsAsTheWriterWould(t *testing.T) {
	s := summarizeLog(t, `job=d attempt=1 seat=s wait_s=0.5 elapsed_s=1.2 tokens=300 outcome=reset billing=billable decision=admit
job=d attempt=2 seat=s wait_s=5 elapsed_s=5 tokens=200 outcome=wait_cap billing=ambiguous decision="refuse: queue wait"
job=d attempt=3 seat=s wait_s=5 elapsed_s=5 tokens=200 decision="refuse: attempt cap" sent=false
`, Options{})
	assert.Equal(t, int64(1), s.All.Unknown)
	assert.Zero(t, s.All.Failed)
	var tr admit.Track
	for _, a := range []admit.Attempt{{Outcome: admit.Reset, Billing: admit.Billable}, {Outcome: admit.WaitCap, Billing: admit.Ambiguous}} {
		tr.Sent(&a)
	}
	assert.Equal(t, ledgerfile.JobUnknown, tr.End(), "the writer's rule")
}

// A job that succeeded and then failed (the proxy writes it when a
// client asks again after an OK answer) failed: it has no kept answer,
// so every token it spent is retry tax.
func TestSucceededThenFailedHasNoKeptAnswer(t *testing.T) {
	s := summarizeLog(t, `job=p attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=120 outcome=ok job_end=succeeded
job=p attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=150 outcome=server_error job_end=failed
`, Options{})
	assert.Equal(t, int64(1), s.All.Failed)
	assert.Zero(t, s.All.Succeeded)
	assert.Equal(t, int64(270), s.All.RetryTax.Tokens)
	assert.Equal(t, Figure(1), s.All.RetryTax.TokensShare)
}

// A hand-written row (no outcome, no billing) is an answered attempt:
// ok, succeeded, and billed.
func TestHandWrittenRowIsBilled(t *testing.T) {
	s := summarizeLog(t, "wait_s=1.2 elapsed_s=6.0 tokens=2100\n", Options{})
	assert.Equal(t, int64(1), s.All.Outcomes["ok"])
	assert.Equal(t, int64(1), s.All.Succeeded)
	assert.Equal(t, int64(1), s.All.Billed)
}

// A job counts once in every group it touched, however many.
func TestJobCountsInEveryGroupItTouched(t *testing.T) {
	s := summarizeLog(t, `job=j attempt=1 seat=a wait_s=1 elapsed_s=2 tokens=10 outcome=server_error
job=k attempt=1 seat=d wait_s=1 elapsed_s=2 tokens=10 outcome=ok
job=j attempt=2 seat=b wait_s=1 elapsed_s=2 tokens=10 outcome=server_error
job=j attempt=3 seat=c wait_s=1 elapsed_s=2 tokens=10 outcome=server_error
job=j attempt=4 seat=a wait_s=1 elapsed_s=2 tokens=10 outcome=ok
job=j attempt=5 seat=d wait_s=1 elapsed_s=2 tokens=10 outcome=ok
`, Options{})
	for key, jobs := range map[string]int64{"a": 1, "b": 1, "c": 1, "d": 2} {
		assert.Equal(t, jobs, group(t, s, key).Jobs, key)
	}
	assert.Equal(t, int64(2), s.All.Jobs)
}
