package model

import (
	"bytes"
	"fmt"
	"math"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/script"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// mcPolicy is a policy that lets the closed forms hold: n retries, no
// breaker, a budget the retries never reach, and near-zero backoff.
func mcPolicy(retries int) rehearse.Policy {
	p := rehearse.DefaultPolicy()
	p.Budget.MaxAttempts = retries + 1
	p.Budget.Deadline = time.Hour
	p.Budget.MaxWait = 10 * time.Second
	p.Budget.TokenCeiling = 1 << 40
	p.Retry.BaseDelay, p.Retry.MaxDelay = time.Millisecond, time.Millisecond
	p.Retry.TimeoutsRetried = retries
	p.Timeouts.Soft, p.Timeouts.Hard = time.Second, 2*time.Second
	p.Breaker.FailureRate = 0
	return p
}

func mustParse(t testing.TB, spec string) Model {
	t.Helper()
	m, err := Parse(spec)
	require.NoError(t, err)
	return m
}

func simulate(t testing.TB, p rehearse.Policy, chain []seat.Config, models []Model, jobs int, seed uint64) *Summary {
	t.Helper()
	specs := make([]rehearse.SeatSpec, len(chain))
	for i, c := range chain {
		specs[i] = rehearse.SeatSpec{Config: c, Planner: models[i%len(models)].Planner(seed, i)}
	}
	s, err := Run(Sim{Policy: p, Seats: specs, Jobs: jobs, Seed: seed})
	require.NoError(t, err)
	require.Equal(t, jobs, s.Jobs)
	return s
}

// within3SE asserts the Monte Carlo mean agrees with the closed form.
func within3SE(t *testing.T, closed, mean, se float64, what string) {
	t.Helper()
	require.Greater(t, se, 0.0, what)
	assert.LessOrEqual(t, math.Abs(mean-closed), 3*se,
		"%s: simulated %.6f ± %.6f, closed form %.6f (%.1f standard errors)", what, mean, se, closed, math.Abs(mean-closed)/se)
}

// Seed 001's geometric sum, played by the attempt loop: a pre-generation
// failure (fast 5xx) with probability f and n retries makes
// (1 − f^(n+1)) / (1 − f) attempts per job, and f^(n+1) of jobs fail.
func TestSimulateMonteCarloExpectedAttempts(t *testing.T) {
	const jobs = 100_000
	for _, tt := range []struct {
		f    float64
		n    int
		seed uint64
	}{{0.05, 3, 1}, {0.2, 1, 2}, {0.2, 4, 3}, {0.5, 2, 4}} {
		t.Run(fmt.Sprintf("f=%g n=%d", tt.f, tt.n), func(t *testing.T) {
			m := mustParse(t, fmt.Sprintf("fixed elapsed=1s 5xx=%g", tt.f))
			s := simulate(t, mcPolicy(tt.n), []seat.Config{{Name: "a"}}, []Model{m}, jobs, tt.seed)
			within3SE(t, admit.ExpectedAttempts(tt.f, tt.n), float64(s.AttemptsPerJob), float64(s.AttemptsPerJobSE), "attempts per job")
			pFail := math.Pow(tt.f, float64(tt.n+1))
			assert.InDelta(t, pFail, float64(s.FailedRate), 3*math.Sqrt(pFail*(1-pFail)/jobs)+1e-9, "failed rate")
			assert.Equal(t, 1.0, float64(s.BilledPerJob)*float64(jobs)/float64(s.Succeeded), "a fast 5xx is free: only the answers are billed")
		})
	}
}

// The same sum in billed attempts: a timeout is ambiguous, so counted as
// billed, and retried up to timeouts_retried times.
func TestSimulateMonteCarloBilledAttempts(t *testing.T) {
	const jobs = 100_000
	for _, tt := range []struct {
		f    float64
		n    int
		seed uint64
	}{{0.05, 3, 5}, {0.3, 2, 6}, {0.1, 1, 7}} {
		t.Run(fmt.Sprintf("f=%g n=%d", tt.f, tt.n), func(t *testing.T) {
			m := mustParse(t, fmt.Sprintf("fixed elapsed=1s hang=%g", tt.f))
			s := simulate(t, mcPolicy(tt.n), []seat.Config{{Name: "a"}}, []Model{m}, jobs, tt.seed)
			within3SE(t, admit.ExpectedAttempts(tt.f, tt.n), float64(s.BilledPerJob), float64(s.BilledPerJobSE), "billed attempts per job")
			assert.Equal(t, s.Attempts, s.Billed, "every attempt reached the provider")
			pUnknown := math.Pow(tt.f, float64(tt.n+1))
			assert.InDelta(t, pUnknown, float64(s.UnknownRate), 3*math.Sqrt(pUnknown*(1-pUnknown)/jobs)+1e-9, "a job whose last attempt timed out is unknown")
			assert.Zero(t, s.Failed)
		})
	}
}

// Seed 001's timeout surcharge C·(1 + t): a share t of attempts time out
// after the provider has the prompt (billed), and are sent once more.
// Prices are on prompt tokens only, so a timed-out attempt costs C in full.
func TestSimulateMonteCarloTimeoutSurcharge(t *testing.T) {
	const jobs = 100_000
	for _, tt := range []struct {
		t    float64
		seed uint64
	}{{0.03, 8}, {0.10, 9}, {0.25, 10}} {
		t.Run(fmt.Sprintf("t=%g", tt.t), func(t *testing.T) {
			m := mustParse(t, fmt.Sprintf("fixed elapsed=1s tokens=1000 prompt=1000 hang=%g", tt.t))
			c := seat.Config{Name: "a", PriceIn: 4} // 1000 prompt tokens at $4/M: C = $0.004
			s := simulate(t, mcPolicy(1), []seat.Config{c}, []Model{m}, jobs, tt.seed)
			within3SE(t, admit.TimeoutSurcharge(0.004, tt.t), float64(s.CostPerJob), float64(s.CostPerJobSE), "cost per job")
			within3SE(t, 1+tt.t, float64(s.BilledPerJob), float64(s.BilledPerJobSE), "billed attempts per job")
		})
	}
}

// Failover: the first leg times out with probability t and the job moves
// to the fallback seat (seed 001: retry a timeout at most once, and
// elsewhere). With the timed-out leg billed in full, the loop pays
// C1 + t·C2 per job — the form of the seed's pre-generation formula. The
// seed's C1 + t·(C1 + C2) is t·C1 above it: it counts the timed-out first
// leg a second time.
func TestSimulateMonteCarloFailover(t *testing.T) {
	const jobs = 100_000
	c1, c2 := 0.004, 0.011
	for _, tt := range []struct {
		t    float64
		seed uint64
	}{{0.03, 11}, {0.2, 12}} {
		t.Run(fmt.Sprintf("t=%g", tt.t), func(t *testing.T) {
			first := mustParse(t, fmt.Sprintf("fixed elapsed=1s tokens=1000 prompt=1000 hang=%g", tt.t))
			second := mustParse(t, "fixed elapsed=1s tokens=1000 prompt=1000")
			chain := []seat.Config{{Name: "primary", PriceIn: c1 * 1000}, {Name: "fallback", PriceIn: c2 * 1000}}
			s := simulate(t, mcPolicy(1), chain, []Model{first, second}, jobs, tt.seed)
			within3SE(t, admit.FailoverPreGeneration(c1, c2, tt.t), float64(s.CostPerJob), float64(s.CostPerJobSE), "cost per job")
			assert.InDelta(t, admit.FailoverAfterTimeout(c1, c2, tt.t)-tt.t*c1, admit.FailoverPreGeneration(c1, c2, tt.t), 1e-15)
			assert.Equal(t, 1.0, float64(s.SuccessRate), "the fallback seat always answers")
			assert.Equal(t, s.Seats[1].Attempts, s.Attempts-jobs, "every retry went to the fallback seat")
		})
	}
}

func TestSimulateSameSeedSameResult(t *testing.T) {
	m := mustParse(t, "lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100 retry_after=1s")
	chain := []seat.Config{{Name: "scratch", PriceIn: 0.15, PriceOut: 0.6}, {Name: "cheap"}}
	p := rehearse.DefaultPolicy()
	run := func(seed uint64, rate float64) *Summary {
		specs, err := Planners(chain, m, seed)
		require.NoError(t, err)
		s, err := Run(Sim{Policy: p, Seats: specs, Jobs: 5000, Seed: seed, Rate: rate})
		require.NoError(t, err)
		return s
	}
	assert.Equal(t, run(1, 0), run(1, 0))
	assert.Equal(t, run(1, 20), run(1, 20))
	assert.NotEqual(t, run(1, 20), run(2, 20))
}

// A script seat simulated writes exactly the rows the loop writes for it:
// the simulator only counts them.
func TestSimulateScriptSeatIsTheLoop(t *testing.T) {
	path := "../../testdata/seats/seed003.yaml"
	sc, err := script.Load(path)
	require.NoError(t, err)
	p := rehearse.DefaultPolicy()
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

	var direct []string
	l, err := rehearse.New(rehearse.Config{
		Policy: p, Seats: []rehearse.SeatSpec{{Config: seat.Config{Name: "scratch", Model: sc.Model()}, Planner: sc}},
		Rand: LoopRand(7), Run: 1, Jobs: 3,
		Sink: func(r *ledgerfile.Row) { direct = append(direct, ledgerfile.FormatRow(r)) },
	})
	require.NoError(t, err)
	_, err = l.RunVirtual(rehearse.VirtualOptions{Jobs: 3, Start: start})
	require.NoError(t, err)

	var simulated []string
	specs, err := Planners([]seat.Config{{Name: "scratch", Kind: "script", Script: path}}, nil, 7)
	require.NoError(t, err)
	s, err := Run(Sim{Policy: p, Seats: specs, Jobs: 3, Seed: 7, Start: start,
		Rows: func(r *ledgerfile.Row) { simulated = append(simulated, ledgerfile.FormatRow(r)) }})
	require.NoError(t, err)
	require.Equal(t, direct, simulated)

	// Seed 003: the reset is billed and retried; the retry hits the wait
	// cap (ambiguous), so the job ends unknown. By the third job four of
	// five calls in the breaker's window failed: it opens, and the third
	// job's retry is refused.
	assert.Equal(t, 2, s.Unknown)
	assert.Equal(t, 1, s.Failed)
	assert.Equal(t, 5, s.Attempts)
	assert.Equal(t, 5, s.Billed)
	assert.Equal(t, map[string]int{"reset": 3, "wait_cap": 2}, s.Outcomes)
	assert.Equal(t, map[string]int{"attempt cap": 2, "breaker open": 1}, s.Refusals, "refusals are unsent rows: the two wait-cap cuts were sent, and count under outcomes")
	assert.Equal(t, 5, s.WastedCalls, "every failed attempt was followed by another row")
}

// The summary over rows read back from a log gives the same figures
// as over the rows as the loop wrote them.
func TestSimulateSummaryOverALog(t *testing.T) {
	m := mustParse(t, "lognormal p50=2s p99=20s 429=2% 5xx=3% reset=1% tokens=1500 prompt=1000")
	p := rehearse.DefaultPolicy()
	chain := []seat.Config{{Name: "scratch", PriceIn: 0.15, PriceOut: 0.6}}
	specs, err := Planners(chain, m, 3)
	require.NoError(t, err)
	var log []byte
	s, err := Run(Sim{Policy: p, Seats: specs, Jobs: 2000, Seed: 3, Rate: 5,
		Rows: func(r *ledgerfile.Row) { log = ledgerfile.AppendRow(log, r) }})
	require.NoError(t, err)
	rows, _, err := ledgerfile.ReadAll(bytesReader(log), "sim.log")
	require.NoError(t, err)
	sum := summary.New(SummaryOptions(p, specs))
	for i := range rows {
		sum.Add(&rows[i], "sim.log")
	}
	fromLog := View(sum.Close(), true, time.Duration(s.DurationS*float64(time.Second)), nil)
	// The summary counts durations at the log's milliseconds; costs are as written.
	assert.Equal(t, s.Jobs, fromLog.Jobs)
	assert.Equal(t, s.Succeeded, fromLog.Succeeded)
	assert.Equal(t, s.Attempts, fromLog.Attempts)
	assert.Equal(t, s.Billed, fromLog.Billed)
	assert.Equal(t, s.Tokens, fromLog.Tokens)
	assert.Equal(t, s.WastedCalls, fromLog.WastedCalls)
	assert.Equal(t, s.Outcomes, fromLog.Outcomes)
	assert.Equal(t, s.E2EP95, fromLog.E2EP95)
	assert.Equal(t, s.DeadlineMisses, fromLog.DeadlineMisses)
	assert.Equal(t, s.UnknownRate, fromLog.UnknownRate)
	assert.Equal(t, s.RefusedRate, fromLog.RefusedRate)
	assert.Equal(t, s.AttemptsPerSuccess, fromLog.AttemptsPerSuccess)
	assert.InDelta(t, float64(s.CostUSD), float64(fromLog.CostUSD), 1e-9)
}

func TestSimulateProgressAndErrors(t *testing.T) {
	m := mustParse(t, "fixed elapsed=1s")
	specs, err := Planners([]seat.Config{{Name: "a", Kind: "openai"}}, m, 1)
	require.NoError(t, err)
	var seen []int
	_, err = Run(Sim{Policy: rehearse.DefaultPolicy(), Seats: specs, Jobs: 10_000, Progress: func(n int) { seen = append(seen, n) }})
	require.NoError(t, err)
	assert.Equal(t, []int{4096, 8192, 10_000}, seen)

	_, err = Run(Sim{Policy: rehearse.DefaultPolicy(), Seats: specs, Jobs: 0})
	require.EqualError(t, err, "jobs: must be at least 1, got 0")
	_, err = Planners([]seat.Config{{Name: "scratch", Kind: "openai"}}, nil, 1)
	require.EqualError(t, err, `seat "scratch" is a openai seat: a simulation plays a model, not the network`)
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// Jobs one after another behind an open breaker: each is refused at once,
// with no virtual time passing, so the next starts at the same instant.
// Those starts must not nest: 200,000 refusals in a row once grew the
// stack to hundreds of megabytes (simulate's RSS), and here would
// overflow the 1 MiB the test allows.
func TestSimulateRefusalsInARowKeepTheStackFlat(t *testing.T) {
	const jobs = 200_000
	p := rehearse.DefaultPolicy()
	p.Breaker.MinRequests = 2
	m := mustParse(t, "fixed elapsed=1s 5xx=100%")
	old := debug.SetMaxStack(1 << 20)
	defer debug.SetMaxStack(old)
	s := simulate(t, p, []seat.Config{{Name: "a"}}, []Model{m}, jobs, 1)
	assert.Equal(t, jobs, s.Failed)
	assert.Greater(t, s.Refusals[string(admit.ReasonBreakerOpen)], jobs-10, "the breaker refuses nearly every job")
}

// A simulated job allocates nothing of its own beyond its share of the
// job-id arena: the loop reuses each finished job's state, its books
// included. (Before, every job's per-seat estimate was a fresh slice.)
func TestSimulateAllocatesNothingPerJob(t *testing.T) {
	const jobs = 20_000
	m := mustParse(t, "lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100")
	specs, err := Planners([]seat.Config{{Name: "a"}, {Name: "b"}}, m, 1)
	require.NoError(t, err)
	p := rehearse.DefaultPolicy()
	for _, rate := range []float64{0, 20} {
		allocs := testing.AllocsPerRun(1, func() {
			_, err := Run(Sim{Policy: p, Seats: specs, Jobs: jobs, Rate: rate, Seed: 1})
			require.NoError(t, err)
		})
		assert.Less(t, allocs, float64(jobs/20), "rate %g: %v allocations for %d jobs", rate, allocs, jobs)
	}
}
