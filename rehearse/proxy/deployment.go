package proxy

import (
	"math"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse"
)

// A seat forwarding several models is several deployments: one model
// failing (or refused for its own content) says nothing of another, so
// each (seat, model) pair has a breaker of its own. A request's chain
// (admit.Chain) is built with the breakers of the models it would send.

// maxDeployments bounds the breakers a proxy keeps: a model name comes
// from the client, so past the bound a seat's unseen models share one
// breaker (otherModels) rather than grow the table without end.
const maxDeployments = 4096

// otherModels is the model key of a seat's shared breaker past maxDeployments.
const otherModels = "\x00other"

type deployKey struct {
	seat  int
	model string
}

// deployment is one (seat, model) pair's breaker, and when it last
// opened (for the Retry-After of a refusal it causes).
type deployment struct {
	br     *admit.Breaker
	opened time.Time
}

// deployment is the breaker of seat s sending model, made on first use
// (under p.mu).
func (p *Proxy) deployment(s int, model string) *deployment {
	k := deployKey{s, model}
	if d, ok := p.deployments[k]; ok {
		return d
	}
	if len(p.deployments) >= maxDeployments {
		k.model = otherModels
		if d, ok := p.deployments[k]; ok {
			return d
		}
	}
	d := &deployment{}
	name, model := p.seats[s].cfg.Name, k.model
	if model == otherModels {
		model = "" // the event names no model of the many it serves
	}
	d.br = admit.NewBreaker(p.opts.Policy.Breaker, func(at time.Time, from, to admit.BreakerState) {
		if to == admit.Open {
			d.opened = at
		}
		if p.opts.OnBreaker != nil {
			p.opts.OnBreaker(name, model, at, from, to)
		}
	})
	p.deployments[k] = d
	return d
}

// seatsFor is the chain of a request naming model, as indexes of
// p.seats: its route's (Policy.Route), else Options.Chain.
func (p *Proxy) seatsFor(model string) []int {
	names, ok := p.opts.Policy.Route(model)
	if !ok {
		return p.def
	}
	out := make([]int, len(names))
	for i, n := range names {
		out[i] = p.index[n]
	}
	return out
}

// modelFor is the model a request naming model sends to seat s at
// position pos of its chain: a fallback seat's own model when it names
// one (the body is rewritten to it), else the client's, else the seat's.
func (p *Proxy) modelFor(s, pos int, model string) string {
	u := &p.seats[s]
	if model == "" || (pos > 0 && u.cfg.Model != "") {
		return u.cfg.Model
	}
	return model
}

// chain is the job machine's chain for a request naming model whose
// prompt and max tokens req holds, over the seats at idx: the policy's
// numbers and every seat with the breaker of the model it would be sent
// (under p.mu).
func (p *Proxy) chain(req *request, idx []int, deps []*deployment) admit.Chain {
	pol := p.opts.Policy
	c := rehearse.NewChain(pol, nil) // the retry budget is set at each decision (call.gate)
	c.Seats = make([]admit.ChainSeat, len(idx))
	for pos, s := range idx {
		cfg := p.seats[s].cfg
		d := p.deployment(s, p.modelFor(s, pos, req.model))
		deps[pos] = d
		c.Seats[pos] = rehearse.ChainSeat(cfg.Name, cfg, d.br, pol.Budget, req.prompt, nil, int(min(req.maxTokens, math.MaxInt32)))
	}
	return c
}

// cooldownLeft is how long until a seat of the chain from s on may let
// a request through: the least cooldown left of an open breaker; a
// half-open one whose probes are out, a second (their answers decide).
func (p *Proxy) cooldownLeft(deps []*deployment, s int, now time.Time) time.Duration {
	left := p.opts.Policy.Breaker.Cooldown
	for ; s < len(deps); s++ {
		d := time.Second
		if deps[s].br.State(now) == admit.Open {
			d = deps[s].opened.Add(p.opts.Policy.Breaker.Cooldown).Sub(now)
		}
		left = min(left, d)
	}
	return max(left, time.Millisecond) // rounded up to whole seconds when sent
}
