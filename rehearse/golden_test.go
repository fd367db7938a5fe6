package rehearse

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/script"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// The golden runs: the testdata scripts on the virtual clock from a fixed
// Now with a fixed seed, so every row — timestamps included — is exact.
// Each test also asserts the rows the scenario exists for, so a golden
// update cannot quietly accept a broken rule.

func goldenText(header string, r rows) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(header), "\n") {
		b.WriteString("# " + strings.TrimSpace(line) + "\n")
	}
	b.WriteString(r.log())
	return b.String()
}

func TestRehearseGoldenSeed003(t *testing.T) {
	sc, err := script.Builtin("seed003")
	require.NoError(t, err)
	got, res := virtual(t, DefaultPolicy(), 1, 3, SeatSpec{Config: seat.Config{Name: "scratch", Model: sc.Model()}, Planner: sc})
	golden(t, "seed003.log", goldenText(`
		seed 003's scenario: built-in script seed003 on seat scratch, default policy
		(deadline 45s, token_ceiling 8000, max_attempts 2, max_wait 5s), seed 3`, got))

	require.Len(t, got, 3)
	a1, a2, a3 := got[0], got[1], got[2]
	assert.Equal(t, "admit", a1.Decision)
	assert.Equal(t, 1200*time.Millisecond, a1.Wait)
	assert.Equal(t, 7200*time.Millisecond, a1.Elapsed)
	assert.Equal(t, int64(2100), a1.Tokens)
	assert.Equal(t, admit.Reset, a1.Outcome)

	// Attempt 2 was admitted on the estimate from attempt 1, then cut live
	// by the wait cap: sent, outcome wait_cap, decision refuse: queue wait.
	assert.False(t, a2.Unsent)
	assert.Equal(t, admit.WaitCap, a2.Outcome)
	assert.Equal(t, "refuse: queue wait", a2.Decision)
	assert.Equal(t, 5*time.Second, a2.Elapsed)
	assert.Equal(t, int64(2100), a2.SpentTokens)
	assert.Equal(t, 1, a2.Used)
	assert.Equal(t, 7200*time.Millisecond, a2.SpentS, "spent_s is the job's spend before the attempt; the gate adds its delay_s")
	assert.Equal(t, 498*time.Millisecond, a2.Delay)
	assert.Empty(t, a2.JobEnd)

	// No third attempt: the cap refuses it before sending, and a job whose
	// last attempt was cut off is unknown, not failed.
	assert.True(t, a3.Unsent)
	assert.Equal(t, "refuse: attempt cap", a3.Decision)
	assert.Equal(t, ledgerfile.JobUnknown, a3.JobEnd)
	assert.Equal(t, Ends{Unknown: 1}, res.Ends)
}

// badDayPolicy is the policy bad-day.yaml was written for.
func badDayPolicy() Policy {
	p := DefaultPolicy()
	p.Budget.MaxAttempts = 3
	p.Budget.MaxWait = 15 * time.Second
	p.Timeouts.Hard = 20 * time.Second
	p.Breaker.FailureRate = 0 // this scenario is about retries; breaker.yaml is about breakers
	return p
}

func TestRehearseGoldenBadDay(t *testing.T) {
	got, res := virtual(t, badDayPolicy(), 7, 4, scriptSpec(t, "bad-day"), scriptSpec(t, "fallback-ok"))
	golden(t, "bad-day.log", goldenText(`
		bad-day.yaml with the fallback chain [bad-day, fallback-ok], 7 jobs one after another, seed 4
		budget {deadline 45s, token_ceiling 8000, max_attempts 3, max_wait 15s}; timeouts.hard 20s; no breaker`, got))
	assert.Equal(t, Ends{Succeeded: 5, Failed: 2}, res.Ends)

	// Job 1: a 429 with Retry-After 2s; the retry sleeps exactly that, not jitter.
	j1 := got.byJob("r1-1")
	require.Len(t, j1, 2)
	assert.Equal(t, admit.RateLimited, j1[0].Outcome)
	assert.Equal(t, 2*time.Second, j1[1].Delay)
	assert.Equal(t, j1[0].TS.Add(j1[0].Elapsed+2*time.Second), j1[1].TS)
	assert.Equal(t, ledgerfile.JobSucceeded, j1[1].JobEnd)

	// Job 2: context length exceeded is permanent: refused, never resent.
	j2 := got.byJob("r1-2")
	require.Len(t, j2, 2)
	assert.Equal(t, admit.ClientError, j2[0].Outcome)
	assert.True(t, j2[1].Unsent)
	assert.Equal(t, "refuse: permanent error", j2[1].Decision)
	assert.Equal(t, ledgerfile.JobFailed, j2[1].JobEnd)

	// Job 3: a fast 503 backs off on the same seat; the hang then times out
	// at the hard timeout and is retried once, on the fallback seat.
	j3 := got.byJob("r1-3")
	require.Len(t, j3, 3)
	assert.Equal(t, "bad-day", j3[1].Seat)
	assert.Equal(t, admit.Timeout, j3[1].Outcome)
	assert.Equal(t, 20*time.Second, j3[1].Elapsed)
	assert.Equal(t, "fallback-ok", j3[2].Seat)
	assert.True(t, j3[2].Fallback)
	assert.Equal(t, ledgerfile.JobSucceeded, j3[2].JobEnd)

	// Job 5: a slow 500 is ambiguous; retried once, on the fallback seat.
	j5 := got.byJob("r1-5")
	require.Len(t, j5, 2)
	assert.Equal(t, admit.Ambiguous, j5[0].Billing)
	assert.Equal(t, "fallback-ok", j5[1].Seat)

	// Job 6: Retry-After 60s would end past the 45s deadline: refused
	// before sleeping, at the instant the 429 came back.
	j6 := got.byJob("r1-6")
	require.Len(t, j6, 2)
	assert.True(t, j6[1].Unsent)
	assert.Equal(t, "refuse: deadline", j6[1].Decision)
	assert.Equal(t, 60*time.Second, j6[1].Delay)
	assert.Equal(t, j6[0].TS.Add(j6[0].Elapsed), j6[1].TS, "no sleep before the refusal")
	assert.Equal(t, ledgerfile.JobFailed, j6[1].JobEnd)
}

// breakerPolicy is the breaker breaker.yaml was written for.
func breakerPolicy() Policy {
	p := DefaultPolicy()
	p.Breaker = admit.BreakerConfig{Window: 30 * time.Second, FailureRate: 0.5, MinRequests: 4, Cooldown: 10 * time.Second, HalfOpenProbes: 1}
	return p
}

// logged is a run's log as the file would hold it: rows, and the
// breaker's `# event` lines between them, in the order the loop wrote them.
type logged struct {
	rows   rows
	events []ledgerfile.Event
	at     []int // per event, the rows written before it
	text   []byte
}

func (l *logged) sink(r *ledgerfile.Row) {
	l.rows = append(l.rows, *r)
	l.text = ledgerfile.AppendRow(l.text, r)
}

func (l *logged) event(e *ledgerfile.Event) {
	var err error
	l.events, l.at = append(l.events, *e), append(l.at, len(l.rows))
	if l.text, err = ledgerfile.AppendEvent(l.text, e); err != nil {
		panic(err)
	}
}

// changes is the events as "seat from>to".
func (l *logged) changes() []string {
	var out []string
	for _, e := range l.events {
		out = append(out, e.Seat+" "+e.From+">"+e.To)
	}
	return out
}

func loggedLoop(t *testing.T, p Policy, jobs int, seed uint64, out *logged, seats ...SeatSpec) *Loop {
	t.Helper()
	l, err := New(Config{
		Policy: p, Seats: seats, Rand: seeded(seed), Sink: out.sink, Events: out.event,
		Run: 1, Jobs: jobs, Prompt: "scratch prompt", MaxTokens: 256,
	})
	require.NoError(t, err)
	return l
}

func loggedText(header string, l *logged) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(header), "\n") {
		b.WriteString("# " + strings.TrimSpace(line) + "\n")
	}
	b.Write(l.text)
	return b.String()
}

func TestRehearseGoldenBreakerFallback(t *testing.T) {
	var lg logged
	res, err := loggedLoop(t, breakerPolicy(), 26, 5, &lg, scriptSpec(t, "breaker"), scriptSpec(t, "fallback-ok")).
		RunVirtual(VirtualOptions{Jobs: 26, Start: t0})
	require.NoError(t, err)
	got := lg.rows
	golden(t, "breaker-fallback.log", loggedText(`
		breaker.yaml with the fallback chain [breaker, fallback-ok], 26 jobs one after another, seed 5
		breaker {window 30s, failure_rate 0.5, min_requests 4, cooldown 10s, half_open_probes 1}; default budget`, &lg))
	assert.Equal(t, 26, res.Ends.Total())

	var notes []string
	for _, r := range got {
		if r.Seat == "breaker" && r.Note != "" {
			notes = append(notes, r.Note)
		}
	}
	// Each job's second attempt goes to the fallback seat (two attempts,
	// two seats: the last attempt is the fallback's), so no job is
	// refused on the breaker seat before its breaker opens.
	assert.Equal(t, []string{
		"half-open probe",
		"half-open probe",
		"half-open probe",
	}, notes, "the breaker's changes are events, not notes")
	assert.Equal(t, []string{
		"breaker closed>open",
		"breaker open>half-open",
		"breaker half-open>open", // the first probe lands on the outage: open again
		"breaker open>half-open",
		"breaker half-open>open",
		"breaker open>half-open",
		"breaker half-open>closed", // the outage is over: closed
	}, lg.changes())
	// Each change is timed on the virtual clock: the opening at the end
	// of the attempt that caused it (the row written next), the
	// half-opening a cooldown or more later.
	require.Len(t, lg.events, 7)
	opened := lg.at[0]
	cause := got[opened]
	assert.Equal(t, cause.TS.Add(cause.Elapsed), lg.events[0].TS)
	assert.GreaterOrEqual(t, lg.events[1].TS.Sub(lg.events[0].TS), 10*time.Second)
	// While open, jobs start on the fallback seat, marked fallback=true.
	next := got[opened+2] // after the opening job's attempt-cap row
	assert.Equal(t, "fallback-ok", next.Seat)
	assert.True(t, next.Fallback)
	assert.Equal(t, 1, next.Attempt)
	last := got[len(got)-1]
	assert.Equal(t, "breaker", last.Seat, "closed again: jobs go back to the first seat")
}

func TestRehearseGoldenBreakerAlone(t *testing.T) {
	// One seat and Poisson arrivals (1 job/s): with nowhere to fall back
	// to, an open breaker refuses; time passes between arrivals, so the
	// cooldown ends and probes go out.
	var lg logged
	res, err := loggedLoop(t, breakerPolicy(), 40, 6, &lg, scriptSpec(t, "breaker")).RunVirtual(VirtualOptions{Jobs: 40, Rate: 1, Start: t0})
	require.NoError(t, err)
	got := lg.rows
	golden(t, "breaker-alone.log", loggedText(`
		breaker.yaml alone, 40 jobs arriving as a Poisson process at 1 job/s, seed 6
		breaker {window 30s, failure_rate 0.5, min_requests 4, cooldown 10s, half_open_probes 1}; default budget`, &lg))
	assert.Equal(t, 40, res.Ends.Total())

	refused, probes := 0, 0
	for _, r := range got {
		if r.Decision == "refuse: breaker open" {
			refused++
			assert.True(t, r.Unsent)
			assert.False(t, r.Fallback)
		}
		if strings.HasPrefix(r.Note, "half-open probe") {
			probes++
		}
	}
	assert.Positive(t, refused)
	assert.GreaterOrEqual(t, probes, 2)
	changes := lg.changes()
	require.NotEmpty(t, changes)
	assert.Equal(t, "breaker closed>open", changes[0])
	assert.Equal(t, "breaker half-open>closed", changes[len(changes)-1])
}

func ExampleLoop_RunVirtual() {
	sc, _ := script.Builtin("seed003")
	var out rows
	l, _ := New(Config{
		Policy: DefaultPolicy(),
		Seats:  []SeatSpec{{Config: seat.Config{Name: "scratch", Model: sc.Model()}, Planner: sc}},
		Rand:   seeded(3), Sink: out.sink, Run: 1, Jobs: 1,
	})
	res, _ := l.RunVirtual(VirtualOptions{Jobs: 1, Start: t0})
	for _, r := range out {
		line := fmt.Sprintf("attempt %d: wait %s elapsed %s outcome=%s decision=%q %s", r.Attempt,
			ledgerfile.FormatSeconds(r.Wait), ledgerfile.FormatSeconds(r.Elapsed), r.Outcome, r.Decision, r.JobEnd)
		fmt.Println(strings.TrimSpace(line))
	}
	fmt.Println(res.Ends)
	// Output:
	// attempt 1: wait 1.200 elapsed 7.200 outcome=reset decision="admit"
	// attempt 2: wait 5.000 elapsed 5.000 outcome=wait_cap decision="refuse: queue wait"
	// attempt 3: wait 5.000 elapsed 11.000 outcome= decision="refuse: attempt cap" unknown
	// {0 0 1 0}
}
