package proxy

import (
	"net/http"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// Shadow mode (Options.Shadow, `proxy --shadow`): each request is
// forwarded once, as a plain pass-through, to the first seat of its
// chain: no wait, no retry, no failover, no refusal, no clock of the
// policy's cutting it; the client gets the provider's answer as it came.
// The job machine runs all the same, as if enforcing, on what was really
// sent: Before on the request (the decision the policy would have made),
// Settle and Take on its answer (the retry or failover it would have
// made). The request's one row is the pass-through's (decision=admit),
// and would= says what the policy would have done: the refusal, a
// fallback seat, a retry, or admit when it would have done the same.

// shadowHard bounds a shadow request's one forward: the policy's hard
// timeout and deadline cut nothing, but a request still ends.
const shadowHard = 10 * time.Minute

// shadow forwards the request once and writes its row with would=.
func (c *call) shadow() {
	var plan admit.Plan
	var would string
	var hard time.Duration // the hard timeout enforcing would have set
	err := c.books(func(m *admit.Job, now time.Time, out *rowOut) {
		p := c.p
		p.mu.Lock()
		c.chain.RetryGate = c.gate()
		plan = m.Before(&c.chain, admit.Ask{Now: now, Waited: m.Waited(now), ClientRetry: c.in.clientRetry()})
		if !plan.Decision.Admit && c.chain.RetryGate != nil {
			c.chain.RetryGate.Sent(now, plan.Retry) // refused, and sent all the same
		}
		p.mu.Unlock()
		switch {
		case !plan.Decision.Admit:
			would = plan.Decision.String()
		case plan.Seat != 0:
			would = ledgerfile.WouldFallback // a breaker open before it, or the job moved on
		}
		// What goes out is the pass-through: the chain's first seat,
		// timed by nothing of the policy's.
		plan.Probe = plan.Probe && plan.Seat == 0
		hard = plan.Hard
		plan.Seat, plan.Hard, plan.Decision = 0, shadowHard, admit.Decision{Admit: true}
		c.planAt = now
		b := c.base(plan.Attempt, 0, now, plan.Spent, plan.Delay, &plan)
		c.hold(now.Add(plan.Hard+flightGrace), &lease{Attempt: plan.Attempt, Seat: c.up(0).cfg.Name, Base: b})
	}, stepBefore)
	c.first = false
	if err != nil {
		c.booksLost(nil)
		return
	}
	x, obs := c.send(&plan)
	ended, ok := c.shadowAfter(&plan, x, &obs, would, hard)
	switch {
	case !ok:
		c.booksLost(x)
	case x.committed:
		if x.f.failed() || obs.Outcome != admit.OK {
			panic(http.ErrAbortHandler) // cut, as the provider cut it: never a cut answer that looks whole
		}
	case ended || c.r.Context().Err() != nil:
		panic(http.ErrAbortHandler) // the client hung up: nobody to answer
	case c.last != nil:
		// The provider's answer as it came: no x-should-retry of the
		// proxy's, the client's own retry layer decides.
		a := c.last
		c.f.head(a.status, a.header, a.length, false)
		c.f.send(a.body, true)
		c.f.settle(false)
	default:
		// No answer to pass on (refused, cut before its headers, or an
		// error body past what the proxy holds): a gateway's 502.
		refusal{status: http.StatusBadGateway, code: "no_answer",
			message: "retrygate: shadow: the provider gave no answer to pass on (" + string(obs.Outcome) + ")"}.write(c.w, c.p.kind)
	}
}

// shadowAfter settles the one forward and writes its row, then has the
// machine take it as if enforcing: a retry or failover it would make is
// the row's would= (unless the policy would not have sent it at all, or
// sent it elsewhere), and no refusal row follows (nothing more is sent
// or decided for the client). ended says the client hung up. A forward
// that ran past the wait cap or the hard timeout (hard) is settled and
// taken as the cut enforcing would have made of it (liveCut); its row
// stays the pass-through's.
func (c *call) shadowAfter(plan *admit.Plan, x *exchange, obs *seat.Observation, would string, hard time.Duration) (ended bool, ok bool) {
	pol := c.p.opts.Policy
	cut, isCut := liveCut(obs, hard, pol.Budget.MaxWait, pol.Retry.SlowServerAfter)
	err := c.books(func(m *admit.Job, now time.Time, out *rowOut) {
		p := c.p
		a := admit.Attempt{Outcome: obs.Outcome, Billing: obs.Billing, Elapsed: obs.Elapsed}
		if isCut {
			a.Outcome, a.Billing, a.Elapsed = cut.Outcome, cut.Billing, cut.Elapsed // the breaker records the cut
		}
		p.mu.Lock()
		priced, note := m.Settle(&c.chain, 0, now, &a, obs.Usage(), plan.Probe)
		p.mu.Unlock()
		if !isCut {
			obs.Billing = a.Billing
		}
		var row ledgerfile.Row
		b := c.base(plan.Attempt, 0, c.planAt, plan.Spent, plan.Delay, plan)
		rehearse.SentRow(&row, &b, m.Track(), obs, a.USD, priced, rehearse.JoinNote(note, obs.Detail))
		rehearse.PriceCache(&row, &c.up(0).cfg, obs)
		taken := ledgerfile.AttemptOf(&row)
		if isCut {
			// The row enforcing would have written, taken in its place.
			var live ledgerfile.Row
			lb := c.base(plan.Attempt, 0, c.planAt, plan.Spent, plan.Delay, plan)
			rehearse.SentRow(&live, &lb, m.Track(), &cut, a.USD, priced, "")
			taken = ledgerfile.AttemptOf(&live)
		}
		p.mu.Lock()
		mv := m.Take(&c.chain, 0, &taken, p.rng)
		p.mu.Unlock()
		if mv.Kind == admit.Refused {
			m.Renumber(mv.Attempt) // no refusal row: its number is the next request's
		}
		if would == "" && mv.Kind == admit.Again {
			would = ledgerfile.WouldRetry
			if mv.Seat != 0 {
				would = ledgerfile.WouldFallback
			}
		}
		if would == "" {
			would = "admit"
		}
		row.Would = would
		ended = mv.Kind == admit.Ended && obs.Outcome == admit.Cancelled
		switch {
		case isCut:
			// The pass-through's own end: it was not cut.
			c.end(&row, admit.EndAfter(true, obs.Outcome, obs.Outcome == admit.ServerError && obs.Billing == admit.Ambiguous))
		case mv.Kind == admit.Ended:
			c.end(&row, mv.End)
		default:
			c.end(&row, m.End()) // the request ends here: its job as it stands
		}
		out.add(&row, c.in.retry)
		c.hold(time.Time{}, nil)
	}, stepAfter)
	return ended, err == nil
}

// liveCut is the one forward as enforcing would have seen it: its
// timeline (first content, or the error body's first byte; last byte)
// through the rule the scripted seat follows for which limit fires
// first (seat.Resolve: the wait cap, a first-token deadline, then the
// hard timeout). ok says a limit would have cut it; the observation is
// then the cut's, as the live proxy would have recorded it. A forward
// that got no answer (refused, cancelled) is judged as it came.
func liveCut(obs *seat.Observation, hard, waitCap, slowAfter time.Duration) (cut seat.Observation, ok bool) {
	switch obs.Outcome {
	case admit.ConnError, admit.Cancelled, admit.Timeout, admit.WaitCap:
		return seat.Observation{}, false
	}
	pl := seat.Plan{TTFB: obs.TTFB, Wait: obs.Wait, Elapsed: obs.Elapsed, Status: obs.HTTPStatus,
		ErrorCode: obs.ErrorCode, PromptTokens: obs.PromptTokens, CompletionTokens: obs.CompletionTokens,
		RetryAfter: obs.RetryAfter, HasRetryAfter: obs.HasRetryAfter}
	if !obs.HasWait {
		pl.Wait = obs.Elapsed + 1 // no content came before its end
	}
	if obs.Outcome == admit.Reset {
		pl.ResetAfter = obs.Elapsed
	}
	cut = seat.Resolve(pl, hard, waitCap, slowAfter)
	if cut.Outcome != admit.Timeout && cut.Outcome != admit.WaitCap {
		return seat.Observation{}, false
	}
	cut.Model, cut.TokensFrom = obs.Model, obs.TokensFrom
	return cut, true
}
