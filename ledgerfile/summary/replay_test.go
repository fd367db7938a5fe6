package summary

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

func TestReplay(t *testing.T) {
	b := admit.Budget{Deadline: 20 * time.Second, TokenCeiling: 8000, MaxAttempts: 2, MaxWait: 5 * time.Second}
	f, err := os.Open("../../testdata/logs/mixed.log")
	require.NoError(t, err)
	defer f.Close()
	p := NewReplayer(b, admit.RetryPolicy{TimeoutsRetried: 1})
	var changed []string
	_, _, err = Scan(f, "mixed.log", false, func(r *ledgerfile.Row) {
		res := p.Add(r, "mixed.log")
		if res.Changed() {
			changed = append(changed, r.Job+":"+res.Now)
		}
		if r.Job == "b" && r.Attempt == 2 {
			assert.Equal(t, 25*time.Second, res.Spent.Time, "b1's elapsed + delay")
			assert.Equal(t, int64(900), res.Spent.Tokens)
			assert.Equal(t, 1, res.Spent.Attempts)
		}
		if r.Job == "d" && r.Attempt == 2 {
			// d1, a slow 500, came back after 12 s: the next attempt's
			// wait is that last observed wait, past the 5 s cap; and a
			// repeat takes 12 s where 20 − 12 = 8 s are left.
			assert.Equal(t, "refuse: queue wait", res.Now)
			assert.Contains(t, res.Also, "deadline")
		}
	})
	require.NoError(t, err)
	// b2: 25 s spent + 0.5 s backoff is past the 20 s deadline; d1 and f1
	// waited past the 5 s wait cap, which cuts an attempt live. b1 and e1
	// were admitted on what was known before them (nothing): their
	// overruns are deadline misses, not flipped decisions.
	assert.Equal(t, []string{"b:refuse: deadline", "d:refuse: queue wait", "f:refuse: queue wait"}, changed)

	// A job-less row replays from the spend it recorded.
	var r ledgerfile.Row
	require.NoError(t, ledgerfile.ParseLine([]byte(`wait_s=18 elapsed_s=9 tokens=2400 spent_s=7.2 spent_tokens=2100 used=1 decision="refuse: queue wait"`), &r))
	res := NewReplayer(admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 1, MaxWait: 30 * time.Second}, admit.RetryPolicy{}).Add(&r, "x")
	assert.Equal(t, "refuse: attempt cap", res.Now)
	assert.False(t, res.Changed())

	// The retry rules' refusals are not the budget's to overturn.
	require.NoError(t, ledgerfile.ParseLine([]byte(`wait_s=1 elapsed_s=1 tokens=1 decision="refuse: permanent error" sent=false`), &r))
	res = NewReplayer(b, admit.RetryPolicy{TimeoutsRetried: 1}).Add(&r, "x")
	assert.Equal(t, "refuse: permanent error", res.Now)
	assert.False(t, res.Changed())
}

// Jobs are judged on their own rows alone: a check of a log whose jobs
// interleave gives each row the decision it gets when its job's rows are
// adjacent, and counts the same good jobs, changes and held-out rows.
func TestCheckOfInterleavedJobsEqualsAdjacentJobs(t *testing.T) {
	var jobs [][]ledgerfile.Row
	benchRows(3000, func(r *ledgerfile.Row) {
		if r.Attempt == 1 {
			jobs = append(jobs, nil)
		}
		jobs[len(jobs)-1] = append(jobs[len(jobs)-1], *r)
	})
	// Every third job ends on a row after its answer: the verdict on the
	// answer waits while other jobs' rows come between.
	for i := 0; i < len(jobs); i += 3 {
		j := jobs[i]
		last := j[len(j)-1]
		j[len(j)-1].JobEnd = ""
		jobs[i] = append(j, ledgerfile.Row{TS: last.TS, Job: last.Job, Attempt: last.Attempt + 1, Seat: last.Seat,
			Wait: last.Wait, Elapsed: last.Elapsed, Tokens: last.Tokens, Unsent: true, Decision: "refuse: attempt cap", JobEnd: ledgerfile.JobSucceeded})
	}
	adjacent := []ledgerfile.Row{}
	for _, j := range jobs {
		adjacent = append(adjacent, j...)
	}
	// Interleaved: five jobs open at once, one row from each in turn.
	interleaved := []ledgerfile.Row{}
	for base := 0; base < len(jobs); base += 5 {
		group := jobs[base:min(base+5, len(jobs))]
		for a := 0; ; a++ {
			took := false
			for _, j := range group {
				if a < len(j) {
					interleaved = append(interleaved, j[a])
					took = true
				}
			}
			if !took {
				break
			}
		}
	}
	require.Len(t, interleaved, len(adjacent))
	th, err := admit.ParseThreshold("wait_s", "p(95) < 3s")
	require.NoError(t, err)
	run := func(rows []ledgerfile.Row) (map[string]string, *CheckResult) {
		c, err := NewCheck(CheckOptions{
			Budget: admit.Budget{Deadline: 8 * time.Second, TokenCeiling: 4000, MaxAttempts: 2, MaxWait: 3 * time.Second},
			Retry:  admit.RetryPolicy{TimeoutsRetried: 1, SlowServerAfter: 10 * time.Second}, Thresholds: []Threshold{{Threshold: th}},
			SlowAfter: 10 * time.Second,
		})
		require.NoError(t, err)
		now := map[string]string{}
		for i := range rows {
			r := rows[i]
			res := c.rp.Add(&r, "t.log")
			now[fmt.Sprintf("%s/%d", r.Job, r.Attempt)] = res.Now
		}
		c2, err := NewCheck(CheckOptions{
			Budget: admit.Budget{Deadline: 8 * time.Second, TokenCeiling: 4000, MaxAttempts: 2, MaxWait: 3 * time.Second},
			Retry:  admit.RetryPolicy{TimeoutsRetried: 1, SlowServerAfter: 10 * time.Second}, Thresholds: []Threshold{{Threshold: th}},
			SlowAfter: 10 * time.Second,
		})
		require.NoError(t, err)
		for i := range rows {
			c2.Add(&rows[i], "t.log")
		}
		return now, c2.Close()
	}
	// Goodput's rule, by hand: a job is good when its answer, counted
	// (not held out), waited under 3 s and it ended succeeded.
	var good, ended int64
	for _, j := range jobs {
		met := false
		for _, r := range j {
			if r.Holdout {
				continue
			}
			if r.Outcome == admit.OK && !r.Unsent {
				met = r.Wait.Round(time.Millisecond) < 3*time.Second
			}
			if r.JobEnd != "" {
				ended++
				if met && r.JobEnd == ledgerfile.JobSucceeded {
					good++
				}
			}
		}
	}
	nowA, resA := run(adjacent)
	assert.Equal(t, good, resA.Goodput.Good)
	assert.Equal(t, ended, resA.Goodput.Jobs)
	nowI, resI := run(interleaved)
	assert.Equal(t, nowA, nowI)
	assert.Equal(t, resA.Goodput, resI.Goodput)
	assert.Equal(t, resA.ChangesTotal, resI.ChangesTotal)
	assert.Equal(t, resA.HeldOut.Rows, resI.HeldOut.Rows)
	assert.Equal(t, len(resA.HeldOut.Refused), len(resI.HeldOut.Refused))
	assert.Positive(t, resA.ChangesTotal, "the budget changes some decisions")
	assert.Positive(t, resA.Goodput.Good, "some jobs are good")
	assert.Less(t, resA.Goodput.Good, resA.Goodput.Jobs, "and some are not")
}

// replayLines replays logfmt rows under b and r and returns each row's
// decision now.
func replayLines(t *testing.T, b admit.Budget, rp admit.RetryPolicy, lines ...string) []string {
	t.Helper()
	p := NewReplayer(b, rp)
	var out []string
	for i, l := range lines {
		var r ledgerfile.Row
		require.NoError(t, ledgerfile.ParseLine([]byte(l), &r), "line %d", i+1)
		out = append(out, p.Add(&r, "x").Now)
	}
	return out
}

// A retry is charged the Retry-After its last failure asked, however soon
// it was sent: a proxy log in which the client retried 0.26 s after a
// 429 asking 60 s, against a 45 s deadline, is refused on replay as the
// loop refuses it before sleeping. Without honour_retry_after the
// client's own wait is what is charged.
func TestReplayChargesRetryAfter(t *testing.T) {
	b := admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 3, MaxWait: 5 * time.Second}
	lines := []string{
		`job=j attempt=1 seat=s wait_s=0.050 elapsed_s=0.050 tokens=0 outcome=rate_limited http_status=429 retry_after_s=60.000 spent_s=0 spent_tokens=0 used=0 decision=admit`,
		`job=j attempt=2 seat=s wait_s=0.050 elapsed_s=0.050 tokens=0 outcome=ok delay_s=0.260 spent_s=0.050 spent_tokens=0 used=1 decision=admit`,
	}
	assert.Equal(t, []string{"admit", "refuse: deadline"}, replayLines(t, b, admit.RetryPolicy{HonorRetryAfter: true}, lines...))
	assert.Equal(t, []string{"admit", "admit"}, replayLines(t, b, admit.RetryPolicy{}, lines...))
}

// A row decided while earlier attempts of its job were in flight (a
// proxy's concurrent requests) says how many (inflight): the replay
// judges it on the books without them, each counted as used with the
// estimate as spent, as the proxy decided it, though their rows come
// first. Without the key the same rows would be judged on attempt 1's
// tokens: attempt 2's estimate (1,500) on top of 1's 1,500 passes the
// 2,000 ceiling.
func TestReplayJudgesRowsDecidedInFlight(t *testing.T) {
	b := admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 2000, MaxAttempts: 3, MaxWait: 5 * time.Second}
	lines := []string{
		`job=j attempt=1 seat=s wait_s=0.1 elapsed_s=1 tokens=1500 outcome=ok spent_s=0 spent_tokens=0 used=0 decision=admit`,
		`job=j attempt=2 seat=s wait_s=0.1 elapsed_s=1 tokens=1500 outcome=ok delay_s=0.1 spent_s=0 spent_tokens=0 used=1 inflight=1 decision=admit`,
		`job=j attempt=3 seat=s wait_s=0 elapsed_s=0 tokens=0 delay_s=0.1 spent_s=0 spent_tokens=0 used=2 inflight=2 decision="refuse: attempt cap" sent=false`,
		`job=j attempt=4 seat=s wait_s=0.1 elapsed_s=1 tokens=1500 spent_s=2.1 spent_tokens=3000 used=2 decision="refuse: attempt cap" sent=false`,
	}
	b.MaxAttempts = 2
	assert.Equal(t, []string{"admit", "admit", "refuse: attempt cap", "refuse: attempt cap"}, replayLines(t, b, admit.RetryPolicy{}, lines...))
	without := append([]string(nil), lines...)
	without[1] = `job=j attempt=2 seat=s wait_s=0.1 elapsed_s=1 tokens=1500 outcome=ok delay_s=0.1 spent_s=0 spent_tokens=0 used=1 decision=admit`
	assert.Equal(t, "refuse: token ceiling", replayLines(t, b, admit.RetryPolicy{}, without...)[1])
}

// A client that hung up (outcome cancelled) may come back under the same
// job through the proxy: its next attempt is judged on the books, not
// refused by a retry rule for the hang-up.
func TestReplayAfterClientHangUp(t *testing.T) {
	b := admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 3, MaxWait: 5 * time.Second}
	got := replayLines(t, b, admit.RetryPolicy{HonorRetryAfter: true},
		`job=j attempt=1 seat=s wait_s=0.050 elapsed_s=0.100 tokens=0 outcome=cancelled spent_s=0 spent_tokens=0 used=0 decision=admit`,
		`job=j attempt=2 seat=s wait_s=0.050 elapsed_s=0.050 tokens=10 outcome=ok delay_s=1 spent_s=0.100 spent_tokens=0 used=1 decision=admit`)
	assert.Equal(t, []string{"admit", "admit"}, got)
}

// The next attempt's wait is the last observed wait on its seat, an
// error answer's included: after a 500 that took 12 s, a retry refused
// for the queue wait stays refused under an 8 s wait cap.
func TestReplayEstimatesTheWaitOfAnErrorAnswer(t *testing.T) {
	b := admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 2, MaxWait: 8 * time.Second}
	got := replayLines(t, b, admit.RetryPolicy{},
		`job=d attempt=1 seat=scratch wait_s=12.000 elapsed_s=12.000 tokens=800 outcome=server_error http_status=500 billing=ambiguous spent_s=0.000 spent_tokens=0 used=0 decision=admit`,
		`job=d attempt=2 seat=scratch wait_s=12.000 elapsed_s=12.000 tokens=800 spent_s=12.000 spent_tokens=800 used=1 decision="refuse: queue wait" sent=false job_end=failed`)
	assert.Equal(t, []string{"refuse: queue wait", "refuse: queue wait"}, got)
}

// mixed.log's header works check with pass.yaml out by hand: d1 flips to
// a refusal, d2 stays refused, refused_rate 2/8.
func TestMixedLogHeaderAgreesWithCheck(t *testing.T) {
	f, err := os.Open("../../testdata/logs/mixed.log")
	require.NoError(t, err)
	defer f.Close()
	c, err := NewCheck(CheckOptions{Budget: admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 2, MaxWait: 8 * time.Second},
		Retry:      admit.RetryPolicy{BaseDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second, SlowServerAfter: 10 * time.Second, HonorRetryAfter: true, TimeoutsRetried: 1},
		Thresholds: []Threshold{{Threshold: mustThreshold(t, "refused_rate", "rate < 30%")}}})
	require.NoError(t, err)
	_, _, err = Scan(f, "mixed.log", false, func(r *ledgerfile.Row) { c.Add(r, "mixed.log") })
	require.NoError(t, err)
	res := c.Close()
	assert.Equal(t, 0.25, *res.Thresholds[0].Observed, "refused_rate 2/8")
	assert.Equal(t, int64(1), res.ChangesTotal, "d1 flips; d2 stays refused")
}

// A job is every row of its id, whatever rows stand between them: its
// books survive another job's row, even after a job_end (the issue's
// replay that forgot X's first attempt because Y's row came between).
func TestReplayInterleavedJobKeepsItsBooks(t *testing.T) {
	b := admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 1, MaxWait: 5 * time.Second}
	lines := []string{
		`job=X attempt=1 seat=s wait_s=0.5 elapsed_s=1 tokens=10 outcome=ok decision=admit job_end=succeeded`,
		`job=Y attempt=1 seat=s wait_s=0.5 elapsed_s=1 tokens=10 outcome=ok decision=admit job_end=succeeded`,
		`job=X attempt=2 seat=s wait_s=0.5 elapsed_s=1 tokens=10 outcome=ok decision=admit job_end=succeeded`,
	}
	for _, order := range [][]int{{0, 1, 2}, {0, 2}} {
		p := NewReplayer(b, admit.RetryPolicy{})
		var now []string
		for _, i := range order {
			var r ledgerfile.Row
			require.NoError(t, ledgerfile.ParseLine([]byte(lines[i]), &r))
			now = append(now, p.Add(&r, "x.log").Now)
		}
		assert.Equal(t, "refuse: attempt cap", now[len(now)-1], "rows %v: X's attempt 2 under max_attempts 1", order)
	}

	// An open job interrupted many times keeps its books too, and a job
	// past endWindow other jobs' ends is one the replay no longer knows.
	var rows []string
	rows = append(rows, `job=A attempt=1 seat=s wait_s=0.5 elapsed_s=1 tokens=10 outcome=server_error decision=admit`)
	for i := range 3 {
		rows = append(rows, fmt.Sprintf(`job=o%d attempt=1 seat=s wait_s=0.5 elapsed_s=1 tokens=10 outcome=ok decision=admit job_end=succeeded`, i))
	}
	rows = append(rows, `job=A attempt=2 seat=s wait_s=0.5 elapsed_s=1 tokens=10 outcome=ok decision=admit job_end=succeeded`)
	p := NewReplayer(b, admit.RetryPolicy{})
	var last Replayed
	for _, l := range rows {
		var r ledgerfile.Row
		require.NoError(t, ledgerfile.ParseLine([]byte(l), &r))
		last = p.Add(&r, "x.log")
	}
	assert.Equal(t, "refuse: attempt cap", last.Now)
	assert.Equal(t, 1, last.Spent.Attempts)
}

// A retry after a context-length error on a seat with a larger window is
// the policy's own: replayed with the seats' windows it changes nothing;
// on a seat no larger, it is the permanent error's.
func TestReplayContextLengthRetry(t *testing.T) {
	b := admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 100000, MaxAttempts: 3, MaxWait: 5 * time.Second}
	lines := []string{
		`job=L attempt=1 seat=small wait_s=0.05 elapsed_s=0.05 tokens=0 outcome=client_error http_status=400 error_code=context_length_exceeded decision=admit`,
		`job=L attempt=2 seat=big wait_s=0.5 elapsed_s=1 tokens=9000 outcome=ok decision=admit job_end=succeeded`,
	}
	replay := func(windows map[string]int64) string {
		p := NewReplayer(b, admit.RetryPolicy{}).WithWindows(windows)
		var last Replayed
		for _, l := range lines {
			var r ledgerfile.Row
			require.NoError(t, ledgerfile.ParseLine([]byte(l), &r))
			last = p.Add(&r, "x.log")
		}
		return last.Now
	}
	assert.Equal(t, "admit", replay(map[string]int64{"small": 8192, "big": 128000}))
	assert.Equal(t, "refuse: permanent error", replay(map[string]int64{"small": 8192, "big": 8192}), "no larger window")
	assert.Equal(t, "admit", replay(map[string]int64{"big": 128000}), "a seat with no declared window is below any declared one")
}
