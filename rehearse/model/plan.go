package model

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/script"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// stream is a random-access family of PCG streams: call n of a seat draws
// from its own generator, seeded from (seed, seat, n), so PlanFor needs no
// shared state, no lock and no allocation, and any n can be asked first.
type stream struct{ k0, k1 uint64 }

func newStream(seed uint64, seatIndex int) stream {
	return stream{k0: splitmix(seed), k1: splitmix(seed ^ splitmix(uint64(seatIndex)+0x9e3779b97f4a7c15))}
}

func (s stream) at(n int) rand.PCG {
	var r rand.PCG
	r.Seed(s.k0, s.k1^splitmix(uint64(n)))
	return r
}

// splitmix is SplitMix64's finaliser: nearby inputs give unrelated outputs.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// unit maps 64 random bits to (0, 1), never 0 or 1, so the normal
// quantile of it is finite.
func unit(x uint64) float64 { return (float64(x>>11) + 0.5) / (1 << 53) }

// Planner plays m on one seat.
func (m *Parametric) Planner(seed uint64, seatIndex int) seat.Planner {
	p := &paramPlanner{m: m, s: newStream(seed, seatIndex)}
	acc := 0.0
	for i, share := range m.Failures {
		acc += share
		p.upTo[i] = acc
	}
	return p
}

type paramPlanner struct {
	m *Parametric
	s stream
	// upTo[i] is the sum of the failure shares through failureKeys[i]: a
	// draw below it and above upTo[i-1] is that failure.
	upTo [len(failureKeys)]float64
}

// Indexes into failureKeys.
const (
	fHang = iota
	fConn
	f429
	f5xx
	fSlow5xx
	f4xx
	fReset
	fNone
)

// PlanLoadedTo makes *plan call n with busy calls in flight on the seat: with
// slots=, an answered call past the seat's slots takes its share of the
// seat, its wait and elapsed stretched by busy/slots (processor sharing,
// fixed at submit). Failures that answer fast (429, 5xx, 4xx), refused
// connections and hangs are as unloaded.
func (p *paramPlanner) PlanLoadedTo(plan *seat.Plan, n, busy int) {
	p.planTo(plan, n)
	if p.m.Slots <= 0 || int64(busy) <= p.m.Slots || plan.Hang || plan.ConnError || plan.Status != 0 {
		return
	}
	f := float64(busy) / float64(p.m.Slots)
	plan.Wait = clampDur(float64(plan.Wait) * f)
	plan.Elapsed = clampDur(float64(plan.Elapsed) * f)
	if plan.ResetAfter > 0 {
		plan.ResetAfter = clampDur(float64(plan.ResetAfter) * f)
	}
}

// PlanFor draws call n: first its outcome, then its latency.
func (p *paramPlanner) PlanFor(n int) seat.Plan {
	var plan seat.Plan
	p.planTo(&plan, n)
	return plan
}

// planTo is PlanFor into *plan.
func (p *paramPlanner) planTo(plan *seat.Plan, n int) {
	m := p.m
	r := p.s.at(n)
	uOutcome, uLatency := unit(r.Uint64()), unit(r.Uint64())

	which := fNone
	for i, acc := range p.upTo {
		if uOutcome < acc {
			which = i
			break
		}
	}
	switch which {
	case fConn:
		*plan = seat.Plan{ConnError: true}
		return
	case fHang:
		*plan = seat.Plan{Hang: true, Wait: script.Never, TTFB: script.Never, PromptTokens: m.Prompt}
		return
	case f429:
		*plan = seat.Plan{Status: 429, Wait: m.FastAfter, Elapsed: m.FastAfter, RetryAfter: m.RetryAfter, HasRetryAfter: m.HasRetryAfter}
		return
	case f5xx:
		*plan = seat.Plan{Status: 503, Wait: m.FastAfter, Elapsed: m.FastAfter}
		return
	case fSlow5xx:
		*plan = seat.Plan{Status: 500, Wait: m.SlowAfter, Elapsed: m.SlowAfter}
		return
	case f4xx:
		*plan = seat.Plan{Status: 400, Wait: m.FastAfter, Elapsed: m.FastAfter}
		return
	}

	factor := 1.0
	elapsed := m.Elapsed
	if m.Kind == Lognormal {
		factor = math.Exp(m.sigma * math.Sqrt2 * math.Erfinv(2*uLatency-1))
		elapsed = clampDur(float64(m.P50) * factor)
	}
	var wait time.Duration
	if m.TTFBShare >= 0 {
		wait = clampDur(float64(elapsed) * m.TTFBShare)
	} else {
		wait = min(clampDur(float64(m.TTFB)*factor), elapsed)
	}
	completion := m.Tokens - m.Prompt
	if m.Rate > 0 {
		completion = int64(min(math.Round(m.Rate*(elapsed-wait).Seconds()), admit.MaxStepTokens))
	}
	*plan = seat.Plan{Wait: wait, Elapsed: elapsed, PromptTokens: m.Prompt, CompletionTokens: max(completion, 0)}
	if which == fReset {
		// Halfway through the stream; a reset is always before the end.
		plan.ResetAfter = max(wait+(elapsed-wait)/2, time.Millisecond)
		if plan.ResetAfter >= plan.Elapsed {
			plan.Elapsed = plan.ResetAfter + time.Millisecond
		}
	}
}

func clampDur(ns float64) time.Duration {
	if !(ns < float64(admit.MaxStep)) { // also catches NaN and +Inf
		return admit.MaxStep
	}
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}
