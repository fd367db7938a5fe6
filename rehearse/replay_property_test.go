package rehearse

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// drawPlan draws one scripted attempt: any outcome class a seat can give.
func drawPlan(t *rapid.T, label string) seat.Plan {
	ms := func(name string, hi int64) time.Duration {
		return time.Duration(rapid.Int64Range(0, hi).Draw(t, label+name)) * time.Millisecond
	}
	p := seat.Plan{
		PromptTokens:     rapid.Int64Range(0, 3000).Draw(t, label+"prompt"),
		CompletionTokens: rapid.Int64Range(0, 2000).Draw(t, label+"completion"),
	}
	p.Wait = ms("wait", 20_000)
	p.TTFB = min(p.Wait, ms("ttfb", 2_000))
	p.Elapsed = p.Wait + ms("gen", 30_000)
	switch rapid.IntRange(0, 7).Draw(t, label+"kind") {
	case 0: // ok
	case 1:
		p.Hang = true
	case 2:
		p.ResetAfter = p.Wait + ms("reset", 5_000) + time.Millisecond
	case 3:
		p.Status = 429
		if rapid.Bool().Draw(t, label+"hasRA") {
			p.RetryAfter, p.HasRetryAfter = ms("retryafter", 90_000), true
		}
	case 4:
		p.Status = rapid.SampledFrom([]int{500, 502, 503}).Draw(t, label+"5xx")
	case 5:
		p.Status, p.ErrorCode = 400, "context_length_exceeded"
	case 6:
		p.ConnError = true
	case 7:
		p.NoUsage = true
	}
	return p
}

func drawPolicy(t *rapid.T) Policy {
	p := DefaultPolicy()
	s := func(name string, lo, hi int64) time.Duration {
		return time.Duration(rapid.Int64Range(lo, hi).Draw(t, name)) * time.Millisecond
	}
	p.Budget = admit.Budget{
		Deadline:     s("deadline", 1_000, 120_000),
		TokenCeiling: rapid.Int64Range(1, 20_000).Draw(t, "tokens"),
		MaxAttempts:  rapid.IntRange(1, 6).Draw(t, "attempts"),
		MaxWait:      s("maxwait", 1, 30_000),
	}
	if rapid.Bool().Draw(t, "spend") {
		p.Budget.MaxSpendUSD = float64(rapid.IntRange(1, 5000).Draw(t, "usd")) / 100_000
	}
	p.Retry.BaseDelay = s("base", 0, 2_000)
	p.Retry.MaxDelay = p.Retry.BaseDelay + s("maxdelay", 0, 10_000)
	p.Retry.SlowServerAfter = s("slow", 0, 20_000)
	p.Retry.HonorRetryAfter = rapid.Bool().Draw(t, "honor")
	p.Retry.TimeoutsRetried = rapid.IntRange(0, 3).Draw(t, "timeouts")
	p.Timeouts.Hard = s("hard", 100, 60_000)
	p.Timeouts.Soft = min(p.Timeouts.Hard, s("soft", 0, 60_000))
	p.Breaker.MinRequests = rapid.IntRange(1, 10).Draw(t, "minreq")
	p.Breaker.FailureRate = float64(rapid.IntRange(1, 100).Draw(t, "rate")) / 100
	p.Breaker.Cooldown = s("cooldown", 0, 60_000)
	if rapid.Bool().Draw(t, "retrybudget") {
		// Small enough that a few jobs' retries run over it.
		p.Retry.Budget = admit.RetryBudgetConfig{
			Ratio:        float64(rapid.IntRange(0, 100).Draw(t, "rbratio")) / 100,
			MinPerSecond: float64(rapid.IntRange(0, 20).Draw(t, "rbfloor")) / 10,
			Window:       s("rbwindow", 1, 30_000),
		}
	}
	return p
}

// Replaying a log under the policy that wrote it changes no decision:
// random policies, random scripted seats, one after another, at a
// concurrency, or arriving at a rate, on the virtual clock.
func TestReplayUnderOwnPolicyFlipsNothing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pol := drawPolicy(t)
		nseats := rapid.IntRange(1, 3).Draw(t, "seats")
		var chain []SeatSpec
		for i := range nseats {
			var ps plans
			for k := range rapid.IntRange(1, 6).Draw(t, "plans") {
				ps = append(ps, drawPlan(t, string(rune('a'+i))+string(rune('0'+k))))
			}
			sp := spec(string(rune('a'+i)), ps)
			if rapid.Bool().Draw(t, "priced") {
				sp.Config.PriceIn, sp.Config.PriceOut = 2.5, 10
			}
			chain = append(chain, sp)
		}
		jobs := rapid.IntRange(1, 12).Draw(t, "jobs")
		opts := VirtualOptions{Jobs: jobs, Start: t0}
		switch rapid.IntRange(0, 2).Draw(t, "shape") {
		case 1:
			opts.Concurrency = rapid.IntRange(2, 6).Draw(t, "concurrency")
		case 2:
			opts.Rate = float64(rapid.IntRange(1, 50).Draw(t, "rate")) / 10
		}
		var out rows
		l, err := New(Config{Policy: pol, Seats: chain, Rand: seeded(rapid.Uint64().Draw(t, "seed")),
			Sink: out.sink, Run: 1, Jobs: jobs, Prompt: "a scratch prompt", MaxTokens: 256})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.RunVirtual(opts); err != nil {
			t.Fatal(err)
		}
		// Through the log's own bytes: what a reviewer's check reads.
		var back []ledgerfile.Row
		for i := range out {
			var r ledgerfile.Row
			if err := ledgerfile.ParseLine([]byte(ledgerfile.FormatRow(&out[i])), &r); err != nil {
				t.Fatalf("row %d does not read back: %v", i+1, err)
			}
			back = append(back, r)
		}
		rp := summary.NewReplayer(pol.Budget, pol.Retry)
		for i := range back {
			res := rp.Add(&back[i], "run.log")
			if res.Logged != res.Now {
				t.Fatalf("row %d (job %s attempt %d) flipped: logged %q, replayed %q\n%s",
					i+1, back[i].Job, back[i].Attempt, res.Logged, res.Now, rows(out).log())
			}
		}

		// check --policy over the log computes the figures the run's own
		// end-of-run summary gave.
		run := summary.New(summary.Options{By: summary.BySeat, SlowAfter: pol.Retry.SlowServerAfter, Deadline: pol.Budget.Deadline})
		for i := range out {
			run.Add(&out[i], "run.log")
		}
		own := run.Close()
		th, err := admit.ParseThreshold("refused_rate", "rate <= 100%")
		if err != nil {
			t.Fatal(err)
		}
		chk, err := summary.NewCheck(summary.CheckOptions{Budget: pol.Budget, Retry: pol.Retry,
			SlowAfter: pol.Retry.SlowServerAfter, Thresholds: []summary.Threshold{{Threshold: th}}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range back {
			chk.Add(&back[i], "run.log")
		}
		got := chk.Close().Summary
		same := func(name string, a, b summary.Figure) {
			if !(a == b || math.IsNaN(float64(a)) && math.IsNaN(float64(b))) {
				t.Fatalf("%s: the run said %v, check over its log says %v\n%s", name, a, b, rows(out).log())
			}
		}
		same("deadline_miss_rate", own.Jobs.DeadlineMissRate, got.Jobs.DeadlineMissRate)
		same("unknown_rate", own.All.UnknownRate, got.All.UnknownRate)
		same("refused_rate", own.RefusedRate, got.RefusedRate)
		same("attempts_per_success", own.All.AttemptsPerSuccess, got.All.AttemptsPerSuccess)
	})
}
