package cmd

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse"
)

func TestRehearseLoadFlagsBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "0"}, "--rate: must be a positive number of jobs per second, got 0"},
		{[]string{"--rate", "fast"}, "--rate:"},
		{[]string{"--rate", "5", "--concurrency", "4"}, "--concurrency and --rate: a run is closed-loop"},
		{[]string{"--ramp", "1,2", "--concurrency", "4"}, "--concurrency and --ramp"},
		{[]string{"--rate", "5", "--ramp", "1,2"}, "--rate and --ramp: give one or the other"},
		{[]string{"--ramp", "1,x/s"}, `--ramp: "x" is not a rate`},
		{[]string{"--ramp-step", "10s"}, "--ramp-step: only with --ramp"},
		{[]string{"--ramp", "1,2", "--ramp-step", "0s"}, "--ramp-step: must be a positive time"},
		{[]string{"--duration", "0s"}, "--duration: must be a positive time"},
		{[]string{"--duration", "soon"}, "--duration:"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := rehearseRun(t, t.TempDir(), nil, tt.args...)
			assert.Equal(t, 2, code, errOut)
			assert.Contains(t, errOut, tt.want)
			assert.Empty(t, out)
		})
	}
}

func TestRehearseRampOnVirtualClock(t *testing.T) {
	dir := badDayConfig(t, "")
	code, out, errOut := rehearseRun(t, dir, nil, "--ramp", "0.5,1,2/s", "--ramp-step", "20s", "--seed", "3")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "step\trate_per_s\tjobs\tachieved_per_s\tsucceeded\tfailed\tunknown\tcancelled\twait_p95_s\twait_cap_cuts\n")
	assert.Regexp(t, `(?m)^1\t0\.5\t\d+\t`, out)
	assert.Regexp(t, `(?m)^3\t2\t\d+\t`, out)
	assert.Contains(t, errOut, "retrygate: arrivals: target 1.17/s, achieved ")
	assert.Contains(t, errOut, "over 60.000s")
	log, err := os.ReadFile(filepath.Join(dir, "rehearsal.log"))
	require.NoError(t, err)
	assert.Contains(t, string(log), " ramp=0.5,1,2 ramp_step=20.000s")
	assert.Contains(t, string(log), "jobs=0 ")

	// Identical flags, identical rows: a ramp is rehearsed for free and repeats.
	_, out2, _ := rehearseRun(t, badDayConfig(t, ""), nil, "--ramp", "0.5,1,2/s", "--ramp-step", "20s", "--seed", "3")
	assert.Equal(t, out, out2)
}

func TestRehearseDurationWithJobsStopsAtEither(t *testing.T) {
	dir := badDayConfig(t, "")
	code, out, errOut := rehearseRun(t, dir, nil, "--rate", "2", "--duration", "1h", "--jobs", "5")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, "5 jobs over")
	assert.Regexp(t, `(?m)^5\t`, out[strings.LastIndex(out, "jobs\tsucceeded"):])
}

func TestSimulateRampIsBoundedByTimeAndRepeats(t *testing.T) {
	args := []string{"simulate", "--policy", simTwo, "--model", simSeed2, "--ramp", "1,2,4/s", "--ramp-step", "100s", "--seed", "9"}
	code, out, errOut := costRun(t, args...)
	require.Equal(t, 0, code, errOut)
	// 100 + 200 + 400 = 700 arrivals expected; Poisson spread ~26.
	m := regexp.MustCompile(`simulated (\d+) jobs per policy \(bounded by time\), Poisson, ramp 1,2,4 jobs/s 1m40s each`).FindStringSubmatch(errOut)
	require.NotNil(t, m, errOut)
	n, _ := strconv.Atoi(m[1])
	assert.InDelta(t, 700, n, 90)
	_, out2, errOut2 := costRun(t, args...)
	assert.Equal(t, out, out2)
	assert.Equal(t, errOut, errOut2)

	code, _, errOut = costRun(t, "simulate", "--policy", simTwo, "--model", simSeed2, "--ramp-step", "5s")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--ramp-step: only with --ramp")
}

// The ramp table is the one summary per step: a job is every row of its
// id, in the step its first row arrived in, and its end state is the
// summary's (a job with no job_end row that answered succeeded).
func TestRampTableIsPerStepSummaries(t *testing.T) {
	start := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	ramp := []rehearse.Step{{Rate: 1, For: 10 * time.Second}, {Rate: 2, For: 10 * time.Second}}
	tab := newRampTable(start, ramp, summary.Options{By: summary.BySeat}, "t.log")
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	for _, r := range []ledgerfile.Row{
		{TS: at(1), Job: "a", Attempt: 1, Seat: "s", Wait: 700 * time.Millisecond, Elapsed: time.Second, Outcome: admit.ServerError, JobEnd: ledgerfile.JobFailed},
		{TS: at(12), Job: "a", Attempt: 2, Seat: "s", Wait: 700 * time.Millisecond, Elapsed: time.Second, Outcome: admit.OK, JobEnd: ledgerfile.JobSucceeded},
		{TS: at(13), Job: "b", Attempt: 1, Seat: "s", Wait: 5 * time.Second, Elapsed: 5 * time.Second, Outcome: admit.WaitCap, Decision: "refuse: queue wait"},
		{TS: at(14), Job: "b", Attempt: 2, Seat: "s", Wait: 300 * time.Millisecond, Elapsed: time.Second, Outcome: admit.OK},
	} {
		tab.add(&r)
	}
	ios, _, out, _ := TestStreams()
	require.NoError(t, tab.print(ios))
	assert.Equal(t, "\nstep\trate_per_s\tjobs\tachieved_per_s\tsucceeded\tfailed\tunknown\tcancelled\twait_p95_s\twait_cap_cuts\n"+
		"1\t1\t1\t0.10\t1\t0\t0\t0\t0.700\t0\n"+
		"2\t2\t1\t0.10\t1\t0\t0\t0\t0.300\t1\n", out.String())
}
