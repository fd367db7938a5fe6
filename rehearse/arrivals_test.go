package rehearse

import (
	"context"
	"math"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/realtime"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// quick is a plan that succeeds at once on the virtual clock's scale.
var quick = seat.Plan{TTFB: 5 * time.Millisecond, Wait: 10 * time.Millisecond, Elapsed: 50 * time.Millisecond, PromptTokens: 10, CompletionTokens: 20}

// starts is each job's first row's instant, in seconds since t0, sorted.
func (r rows) starts() []float64 {
	seen := map[string]bool{}
	var out []float64
	for _, x := range r {
		if !seen[x.Job] {
			seen[x.Job] = true
			out = append(out, x.TS.Sub(t0).Seconds())
		}
	}
	slices.Sort(out)
	return out
}

func virtualLoad(t *testing.T, o VirtualOptions, seed uint64, p seat.Plan) (rows, Result) {
	t.Helper()
	var out rows
	o.Start = t0
	res, err := newLoop(t, DefaultPolicy(), o.Jobs, seed, &out, spec("a", plans{p})).RunVirtual(o)
	require.NoError(t, err)
	return out, res
}

// ksExp is the Kolmogorov–Smirnov statistic of xs against the
// exponential distribution with the given rate.
func ksExp(xs []float64, rate float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := float64(len(xs))
	var d float64
	for i, x := range xs {
		f := 1 - math.Exp(-rate*x)
		d = max(d, float64(i+1)/n-f, f-float64(i)/n)
	}
	return d
}

func gaps(starts []float64) []float64 {
	out := make([]float64, 0, len(starts))
	for i := 1; i < len(starts); i++ {
		out = append(out, starts[i]-starts[i-1])
	}
	return out
}

func TestVirtualRateArrivalsArePoisson(t *testing.T) {
	const rate, jobs = 20.0, 4000
	out, res := virtualLoad(t, VirtualOptions{Jobs: jobs, Rate: rate}, 11, quick)
	require.Equal(t, jobs, res.Started)
	g := gaps(out.starts())
	require.Len(t, g, jobs-1)
	// 1% critical value of the one-sample KS statistic: 1.63/sqrt(n).
	d := ksExp(g, rate)
	t.Logf("KS D=%.4f over %d gaps (1%% critical value %.4f)", d, len(g), 1.63/math.Sqrt(float64(len(g))))
	assert.Less(t, d, 1.63/math.Sqrt(float64(len(g))), "inter-arrival gaps are not exponential at rate %g (D=%.4f)", rate, d)
	// The wrong rate is refused by the same test: it has the power to tell.
	assert.Greater(t, ksExp(g, rate*1.2), 1.63/math.Sqrt(float64(len(g))))
	assert.InDelta(t, rate, res.Arrivals.Achieved, rate*0.05)
	assert.Equal(t, rate, res.Arrivals.Target)

	again, res2 := virtualLoad(t, VirtualOptions{Jobs: jobs, Rate: rate}, 11, quick)
	assert.Equal(t, out.log(), again.log(), "a seeded --rate run is the same every time")
	assert.Equal(t, res, res2)
}

func TestVirtualDurationBoundsRunAndCutsInFlight(t *testing.T) {
	slow := quick
	slow.Elapsed = 3 * time.Second
	out, res := virtualLoad(t, VirtualOptions{Rate: 10, Duration: 10 * time.Second}, 3, slow)
	assert.False(t, res.Interrupted, "reaching --duration is not an interruption")
	assert.Equal(t, 10*time.Second, res.Elapsed)
	assert.InDelta(t, 100, res.Started, 30)
	var cut int
	for _, r := range out {
		assert.Less(t, r.TS.Sub(t0), 10*time.Second, "no job starts at or after the duration")
		if r.Outcome == admit.Cancelled {
			cut++
			assert.Equal(t, "cancelled", r.JobEnd)
			assert.LessOrEqual(t, r.TS.Add(r.Elapsed).Sub(t0), 10*time.Second+time.Millisecond)
		}
	}
	assert.Positive(t, cut, "attempts in flight at the duration are cut and written")
	assert.Equal(t, res.Started, res.Ends.Total(), "every started job has its end row")

	// Closed loop bounded by time: slots refill until the duration.
	out, res = virtualLoad(t, VirtualOptions{Concurrency: 2, Duration: 10 * time.Second}, 3, slow)
	assert.Equal(t, 8, res.Started, "2 slots × ceil(10s/3s) jobs") // starts at 0,3,6,9 s
	assert.Equal(t, Ends{Succeeded: 6, Cancelled: 2}, res.Ends)
	assert.False(t, res.Interrupted)
	_ = out
}

func TestVirtualRampStepsThroughRates(t *testing.T) {
	ramp, err := ParseRamp("5,10,40/s", 20*time.Second)
	require.NoError(t, err)
	out, res := virtualLoad(t, VirtualOptions{Ramp: ramp}, 5, quick)
	count := make([]int, 3)
	for _, s := range out.starts() {
		count[int(s/20)]++
	}
	// 100, 200, 800 expected; Poisson spread is ~sqrt(n).
	assert.InDelta(t, 100, count[0], 35)
	assert.InDelta(t, 200, count[1], 50)
	assert.InDelta(t, 800, count[2], 100)
	assert.Equal(t, 60*time.Second, res.Arrivals.Window)
	assert.InDelta(t, 55.0/3, res.Arrivals.Target, 1e-9)
	assert.False(t, res.Interrupted)
}

func TestParseRampRefusesBadRates(t *testing.T) {
	for _, s := range []string{"", "/s", "1,,2", "1,x", "0,1", "-1", "1,NaN", "1,Inf", "2e7", "0x1p2", "1_0"} {
		_, err := ParseRamp(s, time.Second)
		assert.Error(t, err, "%q", s)
	}
	_, err := ParseRamp("1,2", 0)
	assert.Error(t, err)
	got, err := ParseRamp(" 1, 2.5 ,4/s", time.Second)
	require.NoError(t, err)
	assert.Equal(t, []Step{{1, time.Second}, {2.5, time.Second}, {4, time.Second}}, got)
}

// Real time against `seat serve` on loopback. What is asserted is that the
// schedule is held (arrivals read the clock, so lateness does not add up),
// not the machine's speed: the bounds hold on a loaded 2-core machine.

func TestRehearseLiveRateHoldsTarget(t *testing.T) {
	srv := serveSeat(t, seat.Plan{TTFB: 2 * time.Millisecond, Wait: 5 * time.Millisecond, Elapsed: 20 * time.Millisecond, PromptTokens: 5, CompletionTokens: 5})
	var out syncRows
	const jobs, rate = 100, 50.0
	l, err := New(Config{Policy: livePolicy(), Seats: []SeatSpec{srv.seat(t, "live")}, Rand: seeded(11), Sink: out.sink, Run: 1, Jobs: jobs, Prompt: "scratch", MaxTokens: 8})
	require.NoError(t, err)
	res, err := l.RunReal(context.Background(), RealOptions{Jobs: jobs, Rate: rate})
	require.NoError(t, err)
	a := res.Arrivals
	t.Logf("target %.1f/s scheduled %.2f/s achieved %.2f/s window %v lag mean %v max %v", a.Target, a.Scheduled, a.Achieved, a.Window, a.MeanLag, a.MaxLag)
	assert.Equal(t, jobs, a.Started)
	assert.Equal(t, Ends{Succeeded: jobs}, res.Ends)
	assert.InEpsilon(t, a.Scheduled, a.Achieved, 0.05, "achieved rate beside the schedule's")
	assert.InEpsilon(t, rate, a.Achieved, 0.05, "achieved rate beside the target (this seed's schedule draws %.2f/s)", a.Scheduled)
	assert.False(t, a.Behind())
	assert.InEpsilon(t, rate, a.Scheduled, 0.02, "seed 11 draws a schedule near the target")
}

// An attempt the cut stops mid-stream is written alike on both clocks
// (cutShort, which the real-time plan seat writes too): cancelled, with
// the prompt it sent and the headers and first content it had seen.
func TestVirtualCutKeepsWhatTheAttemptSaw(t *testing.T) {
	slow := quick
	slow.Elapsed = 3 * time.Second
	out, res := virtualLoad(t, VirtualOptions{Concurrency: 1, Duration: 10 * time.Second}, 3, slow)
	require.Equal(t, Ends{Succeeded: 3, Cancelled: 1}, res.Ends) // starts at 0, 3, 6 and 9 s
	cut := out[len(out)-1]
	require.Equal(t, admit.Cancelled, cut.Outcome)
	assert.Equal(t, time.Second, cut.Elapsed)
	assert.Equal(t, slow.TTFB, cut.TTFB)
	assert.Equal(t, slow.Wait, cut.Wait)
	assert.Equal(t, slow.PromptTokens, cut.PromptTokens)
	assert.Equal(t, seat.FromScript, cut.TokensFrom)
}

func TestRehearseLiveDurationStopsOnTime(t *testing.T) {
	// Every attempt takes 400ms: jobs are in flight when the time is up.
	srv := serveSeat(t, seat.Plan{TTFB: 2 * time.Millisecond, Wait: 5 * time.Millisecond, Elapsed: 400 * time.Millisecond, PromptTokens: 5, CompletionTokens: 5})
	var out syncRows
	l, err := New(Config{Policy: livePolicy(), Seats: []SeatSpec{srv.seat(t, "live")}, Rand: seeded(4), Sink: out.sink, Run: 1, Jobs: 100, Prompt: "scratch", MaxTokens: 8})
	require.NoError(t, err)
	const d = time.Second
	res, err := l.RunReal(context.Background(), RealOptions{Rate: 50, Duration: d})
	require.NoError(t, err)
	t.Logf("elapsed %v for --duration %v; started %d; ends %+v; arrivals %+v", res.Elapsed, d, res.Started, res.Ends, res.Arrivals)
	assert.GreaterOrEqual(t, res.Elapsed, d)
	// The event: attempts in flight at the duration are cut (waited for,
	// they would have succeeded). How soon after d the run ends is load,
	// so only a ceiling a hang reaches is asserted (realtime).
	assert.Positive(t, res.Ends.Cancelled, "attempts in flight at the duration are cut")
	assert.Less(t, res.Elapsed, realtime.By(d), "the run stops at --duration")
	assert.False(t, res.Interrupted)
	assert.Equal(t, res.Started, res.Ends.Total(), "every started job has its end row")
	for _, r := range out.r {
		if r.Outcome == admit.Cancelled {
			assert.Equal(t, "cancelled", r.JobEnd)
		}
	}
}

// A seat server with one slot queues the rest: the wait a client sees
// grows with the load, which is what a rate ramp is meant to find.
func TestRehearseLiveSlotsQueue(t *testing.T) {
	p := seat.Plan{TTFB: 5 * time.Millisecond, Wait: 60 * time.Millisecond, Elapsed: 80 * time.Millisecond, PromptTokens: 5, CompletionTokens: 5}
	srv, err := seatserver.New(seatserver.Options{Planner: plans{p}, Format: seatserver.OpenAI, Slots: 1})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	live := (&liveServer{srv: srv, addr: ln.Addr()}).seat(t, "one-slot")

	var out syncRows
	l, err := New(Config{Policy: livePolicy(), Seats: []SeatSpec{live}, Rand: seeded(1), Sink: out.sink, Run: 1, Jobs: 3, Prompt: "scratch", MaxTokens: 8})
	require.NoError(t, err)
	res, err := l.RunReal(context.Background(), RealOptions{Jobs: 3, Concurrency: 3})
	require.NoError(t, err)
	require.Equal(t, Ends{Succeeded: 3}, res.Ends)
	var waits []time.Duration
	for _, r := range out.r {
		waits = append(waits, r.Wait)
	}
	slices.Sort(waits)
	t.Logf("waits %v", waits)
	assert.GreaterOrEqual(t, waits[1], 60*time.Millisecond+80*time.Millisecond, "the second waits a whole attempt for the slot")
	assert.GreaterOrEqual(t, waits[2], 60*time.Millisecond+2*80*time.Millisecond, "the third waits two")
}
