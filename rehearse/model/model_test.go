package model

import (
	"math"
	"os"
	"path/filepath"
	"slices"
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

func TestModelParseCanonical(t *testing.T) {
	tests := []struct{ in, want string }{
		{"lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100",
			"lognormal p50=2.1s p99=14s tokens=2100 hang=0.3% 429=1% 5xx=2%"},
		{"  lognormal   P99=14 p50=2.1  ", "lognormal p50=2.1s p99=14s"},
		{"lognormal p50=1s p95=3s ttft=400ms rate=50 prompt=800", "lognormal p50=1s p95=3s ttft=400ms prompt=800 rate=50"},
		{"fixed elapsed=2s 5xx=0.05", "fixed elapsed=2s 5xx=5%"},
		{"fixed elapsed=1500ms ttft=100% conn=1% slow5xx=1% 4xx=1% reset=1% retry_after=3s fast=50ms slow=20s",
			"fixed elapsed=1.5s ttft=100% conn=1% slow5xx=1% 4xx=1% reset=1% retry_after=3s fast=50ms slow=20s"},
		{"fixed elapsed=2s ttft=25%", "fixed elapsed=2s"},
		{"lognormal p50=2s p999=60s", "lognormal p50=2s p999=1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			m, err := Parse(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, m.String())
			again, err := Parse(m.String())
			require.NoError(t, err)
			assert.Equal(t, m.String(), again.String())
		})
	}
}

func TestModelParseErrorsNameTheTerm(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty model"},
		{"gamma p50=1s", `term "gamma": unknown model kind`},
		{"p50=1s p99=2s", `term "p50=1s": the model starts with its kind`},
		{"lognormal p50=2.1s p99=14s hang=0.3% foo=1", `term "foo=1": unknown key "foo"`},
		{"lognormal p50=abc p99=14s", `term "p50=abc": not a duration`},
		{"lognormal p50=2s p99=14s 429=150%", `term "429=150%": must be between 0% and 100%, got 150%`},
		{"lognormal p50=2s p99=14s 5xx=-1%", `term "5xx=-1%": must be between`},
		{"lognormal p50=2s p99=14s 5xx=NaN%", `term "5xx=NaN%": not a rate`},
		{"lognormal p50=2s p99=14s hang", `term "hang": want key=value`},
		{"lognormal p50=2s p99=14s hang=", `term "hang=": want key=value`},
		{"lognormal p50=2s p99=14s p50=3s", `term "p50=3s": given twice`},
		{"lognormal p50=2s", "lognormal needs p50= and one tail quantile"},
		{"lognormal p50=2s p95=3s p99=4s", "not several"},
		{"lognormal p50=20s p99=14s", `term "p99=14s": is below p50=20s`},
		{"lognormal p50=0s p99=14s", `term "p50=0s": must be positive`},
		{"lognormal p50=2s p99=1000h", `term "p99=1000h": 1000h0m0s is past a model's limit of 24h0m0s per attempt`},
		{"fixed p50=2s", "fixed takes elapsed="},
		{"fixed ttft=1s", "fixed needs elapsed="},
		{"fixed elapsed=2s tokens=10 rate=5", "give tokens= or rate=, not both"},
		{"fixed elapsed=2s tokens=10 prompt=20", `term "prompt=20": is more than tokens=10`},
		{"fixed elapsed=2s rate=0", `term "rate=0": tokens per second must be above 0`},
		{"fixed elapsed=2s tokens=1.5", `term "tokens=1.5": not a whole number`},
		{"fixed elapsed=2s hang=60% 5xx=50%", "failure shares add up to 110%, more than 100%"},
		{"fixed elapsed=0x10", `term "elapsed=0x10": not a duration`},
		{"log:", "log: needs a file"},
		{"script:", "script: needs a file"},
		{"log:/nonexistent/rehearsal.log", `log "/nonexistent/rehearsal.log": no such file or directory`},
		{"script:/nonexistent/s.yaml", "/nonexistent/s.yaml: cannot read script"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := Parse(tt.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func plans(p seat.Planner, n int) []seat.Plan {
	out := make([]seat.Plan, n)
	for i := range out {
		out[i] = p.PlanFor(i)
	}
	return out
}

func TestModelDeterministicAndRandomAccess(t *testing.T) {
	m, err := Parse("lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100")
	require.NoError(t, err)
	a := plans(m.Planner(7, 0), 500)
	assert.Equal(t, a, plans(m.Planner(7, 0), 500), "same seed, same seat: same calls")
	assert.NotEqual(t, a, plans(m.Planner(8, 0), 500), "another seed")
	assert.NotEqual(t, a, plans(m.Planner(7, 1), 500), "another seat draws its own stream")
	p := m.Planner(7, 0)
	for _, n := range []int{499, 3, 250, 0, 3} {
		assert.Equal(t, a[n], p.PlanFor(n), "call %d asked out of order", n)
	}
}

func TestModelPlanForDoesNotAllocate(t *testing.T) {
	for _, spec := range []string{"lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% rate=40", "fixed elapsed=1s reset=50%"} {
		m, err := Parse(spec)
		require.NoError(t, err)
		p := m.Planner(1, 0)
		n := 0
		allocs := testing.AllocsPerRun(1000, func() { p.PlanFor(n); n++ })
		assert.Zero(t, allocs, spec)
	}
}

// Seed 002's shape comes out of the lognormal: the median and p99 of
// answered calls, and 0.3% that never return.
func TestModelLognormalShape(t *testing.T) {
	m, err := Parse("lognormal p50=2.1s p99=14s hang=0.3%")
	require.NoError(t, err)
	p := m.Planner(42, 0)
	const n = 400_000
	var elapsed []float64
	hangs := 0
	for i := range n {
		pl := p.PlanFor(i)
		if pl.Hang {
			hangs++
			continue
		}
		elapsed = append(elapsed, pl.Elapsed.Seconds())
		require.LessOrEqual(t, pl.Wait, pl.Elapsed)
	}
	slices.Sort(elapsed)
	assert.InDelta(t, 2.1, admit.Percentile(elapsed, 50), 0.03)
	assert.InDelta(t, 14, admit.Percentile(elapsed, 99), 0.4)
	// Binomial: 0.3% of 400k is 1200 ± 35 (one sd); allow four.
	assert.InDelta(t, 1200, hangs, 140)
}

func TestModelFailureSharesAndResolve(t *testing.T) {
	m, err := Parse("fixed elapsed=2s ttft=500ms tokens=1000 prompt=400 hang=10% conn=10% 429=10% 5xx=10% slow5xx=10% 4xx=10% reset=10% retry_after=3s slow=12s")
	require.NoError(t, err)
	p := m.Planner(3, 0)
	counts := map[admit.Outcome]int{}
	const n = 100_000
	for i := range n {
		o := seat.Resolve(p.PlanFor(i), 25*time.Second, 0, 10*time.Second)
		counts[o.Outcome]++
		switch o.Outcome {
		case admit.OK:
			require.Equal(t, 500*time.Millisecond, o.Wait)
			require.Equal(t, 2*time.Second, o.Elapsed)
			require.Equal(t, int64(1000), o.Tokens())
		case admit.RateLimited:
			require.True(t, o.HasRetryAfter)
			require.Equal(t, 3*time.Second, o.RetryAfter)
			require.Equal(t, admit.Free, o.Billing)
		case admit.Timeout: // the hang, cut by the hard timeout
			require.Equal(t, 25*time.Second, o.Elapsed)
		case admit.Reset:
			require.Equal(t, admit.Billable, o.Billing)
			require.Less(t, o.Elapsed, 2*time.Second)
		case admit.ServerError:
			if o.Elapsed >= 10*time.Second {
				require.Equal(t, admit.Ambiguous, o.Billing, "slow 5xx")
			} else {
				require.Equal(t, admit.Free, o.Billing, "fast 5xx")
			}
		}
	}
	for _, o := range []admit.Outcome{admit.Timeout, admit.ConnError, admit.RateLimited, admit.ClientError, admit.Reset} {
		assert.InDelta(t, n/10, counts[o], 500, o) // sd ≈ 95
	}
	assert.InDelta(t, 2*n/10, counts[admit.ServerError], 700)
	assert.InDelta(t, 3*n/10, counts[admit.OK], 700)
}

func TestModelRateMakesSlowCallsExpensive(t *testing.T) {
	m, err := Parse("lognormal p50=2s p99=20s ttft=10% rate=50 prompt=100")
	require.NoError(t, err)
	p := m.Planner(9, 0)
	for i := range 1000 {
		pl := p.PlanFor(i)
		want := int64(math.Round(50 * (pl.Elapsed - pl.Wait).Seconds()))
		require.Equal(t, want, pl.CompletionTokens)
		require.Equal(t, int64(100), pl.PromptTokens)
	}
	// A hard timeout cuts the long ones: the partial completion is billed pro rata.
	for i := range 1000 {
		pl := p.PlanFor(i)
		o := seat.Resolve(pl, 10*time.Second, 0, 0)
		if pl.Elapsed > 10*time.Second {
			require.Equal(t, admit.Timeout, o.Outcome)
			require.Equal(t, admit.Ambiguous, o.Billing)
		}
	}
}

func TestModelTTFBDurationScalesAndCaps(t *testing.T) {
	m, err := Parse("lognormal p50=2s p99=20s ttft=1s")
	require.NoError(t, err)
	p := m.Planner(5, 0)
	for i := range 2000 {
		pl := p.PlanFor(i)
		require.LessOrEqual(t, pl.Wait, pl.Elapsed)
		// The same draw scales both: wait/elapsed stays at ttft/p50.
		assert.InDelta(t, 0.5, float64(pl.Wait)/float64(pl.Elapsed), 1e-6)
	}
}

func writeLog(t *testing.T, rows []ledgerfile.Row) string {
	t.Helper()
	var b []byte
	b = append(b, ledgerfile.Header+"\n"...)
	for i := range rows {
		b = ledgerfile.AppendRow(b, &rows[i])
	}
	path := filepath.Join(t.TempDir(), "rehearsal.log")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

func TestModelLogReplaysObservations(t *testing.T) {
	rows := []ledgerfile.Row{
		{Job: "a", Attempt: 1, Seat: "scratch", Wait: 1200 * time.Millisecond, Elapsed: 4 * time.Second, Tokens: 2100, PromptTokens: 1500, CompletionTokens: 600, HasSplit: true, Outcome: admit.OK, HTTPStatus: 200, Billing: admit.Billable, Decision: "admit"},
		{Job: "b", Attempt: 1, Seat: "scratch", Wait: 300 * time.Millisecond, Elapsed: 300 * time.Millisecond, Outcome: admit.RateLimited, HTTPStatus: 429, RetryAfter: 2 * time.Second, HasRetryAfter: true, Billing: admit.Free, Decision: "admit"},
		{Job: "c", Attempt: 1, Seat: "cheap", Wait: 1 * time.Second, Elapsed: 7200 * time.Millisecond, Tokens: 2100, PromptTokens: 1500, CompletionTokens: 600, HasSplit: true, Outcome: admit.Reset, Billing: admit.Billable, Decision: "admit"},
		{Job: "d", Attempt: 1, Seat: "cheap", Elapsed: 25 * time.Second, Outcome: admit.Timeout, Billing: admit.Ambiguous, Decision: "admit"},
		{Job: "e", Attempt: 1, Seat: "cheap", Wait: 5 * time.Second, Elapsed: 5 * time.Second, Tokens: 2000, Decision: "refuse: queue wait", Unsent: true},
		{Job: "f", Attempt: 1, Seat: "cheap", Elapsed: 1 * time.Second, Outcome: admit.Cancelled, Billing: admit.Ambiguous, Decision: "admit"},
		{Job: "g", Attempt: 1, Seat: "cheap", Elapsed: 90 * time.Millisecond, Outcome: admit.ServerError, HTTPStatus: 503, Billing: admit.Free, Decision: "admit"},
		{Job: "h", Attempt: 1, Seat: "cheap", Wait: 500 * time.Millisecond, Elapsed: 3 * time.Second, Tokens: 1300, PromptTokens: 300, CompletionTokens: 1000, HasSplit: true, Outcome: admit.Incomplete, ErrorCode: "max_output_tokens", HTTPStatus: 200, Billing: admit.Billable, Decision: "admit"},
	}
	path := writeLog(t, rows)
	m, err := Parse("log:" + path)
	require.NoError(t, err)
	lm := m.(*Log)
	require.Len(t, lm.Plans, 6, "unsent and cancelled rows are left out")
	assert.Equal(t, "log:"+path, m.String())

	// Under no limits each plan plays back as the row observed it.
	want := []struct {
		outcome admit.Outcome
		wait    time.Duration
		elapsed time.Duration
		tokens  int64
	}{
		{admit.OK, 1200 * time.Millisecond, 4 * time.Second, 2100},
		{admit.RateLimited, 300 * time.Millisecond, 300 * time.Millisecond, 0},
		{admit.Reset, 1 * time.Second, 7200 * time.Millisecond, 2100},
		{admit.Timeout, 0, 25 * time.Second, 0}, // a hang, cut by the same 25s limit
		{admit.ServerError, 90 * time.Millisecond, 90 * time.Millisecond, 0},
		{admit.Incomplete, 500 * time.Millisecond, 3 * time.Second, 1300},
	}
	for i, w := range want {
		o := seat.Resolve(lm.Plans[i], 25*time.Second, 0, 10*time.Second)
		assert.Equal(t, w.outcome, o.Outcome, "row %d", i)
		assert.Equal(t, w.elapsed, o.Elapsed, "row %d", i)
		if o.HasWait {
			assert.Equal(t, w.wait, o.Wait, "row %d", i)
		}
		assert.Equal(t, w.tokens, o.Tokens(), "row %d", i)
	}
	o := seat.Resolve(lm.Plans[1], 0, 0, 0)
	assert.Equal(t, 2*time.Second, o.RetryAfter)
	assert.Equal(t, "max_output_tokens", seat.Resolve(lm.Plans[5], 0, 0, 0).ErrorCode, "an incomplete answer keeps its reason")

	// A seat picks that seat's rows only.
	m, err = Parse("log:" + path + ":scratch")
	require.NoError(t, err)
	require.Len(t, m.(*Log).Plans, 2)
	assert.Equal(t, "log:"+path+":scratch", m.String())
	_, err = Parse("log:" + path + ":nope")
	require.EqualError(t, err, `log "`+path+`": no sent attempts on seat "nope" (seats in the log: cheap, scratch)`)

	// Draws cover the log roughly evenly and repeat for a seed.
	p := m.Planner(1, 0)
	seen := map[time.Duration]int{}
	for i := range 10_000 {
		seen[p.PlanFor(i).Elapsed]++
	}
	assert.Len(t, seen, 2)
	for _, c := range seen {
		assert.InDelta(t, 5000, c, 300)
	}
}

func TestModelLogBadLineNamesIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.log")
	require.NoError(t, os.WriteFile(path, []byte("wait_s=1 elapsed_s=2 tokens=3\nwait_s=abc elapsed_s=1 tokens=1\n"), 0o644))
	_, err := Parse("log:" + path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+": line 2: wait_s")
	empty := filepath.Join(t.TempDir(), "empty.log")
	require.NoError(t, os.WriteFile(empty, []byte(ledgerfile.Header+"\n"), 0o644))
	_, err = Parse("log:" + empty)
	require.ErrorContains(t, err, "no sent attempts to replay")
}

func TestModelScriptPlaysTheScript(t *testing.T) {
	path := "../../testdata/seats/seed003.yaml"
	s, err := script.Load(path)
	require.NoError(t, err)
	m, err := Parse("script:" + path)
	require.NoError(t, err)
	assert.Equal(t, "script:"+path, m.String())
	for _, seed := range []uint64{1, 99} {
		p := m.Planner(seed, 2)
		for n := range 6 {
			assert.Equal(t, s.PlanFor(n), p.PlanFor(n), "a script ignores the seed")
		}
	}
	assert.Equal(t, 7200*time.Millisecond, m.Planner(0, 0).PlanFor(0).ResetAfter)
	b, err := Parse("script:builtin:seed003")
	require.NoError(t, err)
	assert.Equal(t, s.PlanFor(1), b.Planner(0, 0).PlanFor(1))
}

// FuzzModel: no input panics; a model that parses prints a canonical form
// that parses to itself, and plays sane plans.
func FuzzModel(f *testing.F) {
	for _, s := range []string{
		"lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100",
		"fixed elapsed=2s 5xx=5%",
		"lognormal p50=1 p95=3 ttft=400ms rate=50 prompt=800 reset=1% retry_after=2",
		"fixed elapsed=1e-3 ttft=100% slow5xx=0.5 slow=1h fast=0",
		"lognormal p50=1ns p999=24h",
		"fixed elapsed=2s hang=60% 5xx=50%",
		"lognormal p50=abc",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		if strings.HasPrefix(strings.TrimSpace(spec), "log:") || strings.HasPrefix(strings.TrimSpace(spec), "script:") {
			return // those read files; the grammar is what is fuzzed
		}
		m, err := ParseParametric(spec)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		canon := m.String()
		again, err := ParseParametric(canon)
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", canon, spec, err)
		}
		if again.String() != canon {
			t.Fatalf("canonical form drifts: %q → %q", canon, again.String())
		}
		p := m.Planner(1, 0)
		for n := range 8 {
			pl := p.PlanFor(n)
			if pl.Elapsed < 0 || pl.Wait < 0 || pl.CompletionTokens < 0 || pl.PromptTokens < 0 || pl.Elapsed > admit.MaxStep+time.Millisecond {
				t.Fatalf("%q: call %d: bad plan %+v", spec, n, pl)
			}
			if !pl.Hang && !pl.ConnError && pl.Wait > pl.Elapsed {
				t.Fatalf("%q: call %d: wait %s after elapsed %s", spec, n, pl.Wait, pl.Elapsed)
			}
			seat.Resolve(pl, 25*time.Second, 5*time.Second, 10*time.Second)
		}
	})
}

// The planner's failure indexes name failureKeys in order.
func TestFailureIndexes(t *testing.T) {
	assert.Equal(t, [...]string{"hang", "conn", "429", "5xx", "slow5xx", "4xx", "reset"},
		[...]string{failureKeys[fHang], failureKeys[fConn], failureKeys[f429], failureKeys[f5xx], failureKeys[fSlow5xx], failureKeys[f4xx], failureKeys[fReset]})
	assert.Equal(t, len(failureKeys), fNone)
}
