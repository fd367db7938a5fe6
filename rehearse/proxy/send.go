package proxy

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"retrygate/admit"
	"retrygate/ledgerfile"
	"retrygate/rehearse"
	"retrygate/rehearse/seat"
)

// send forwards an admitted request through the seat's stopwatch, then
// takes the attempt into the job's books and writes its row. A cut-off
// before the answer's headers is answered 504 (timeout, wait cap) or 502
// (the upstream failed); a cut-off mid-answer aborts the client's
// connection, so it sees a broken stream, never a clean end.
func (p *Proxy) send(w http.ResponseWriter, r *http.Request, body []byte, req *request, a *attempt) {
	u := &p.seats[a.seat]
	if p.kind == "openai" && !req.responses && req.stream && !req.usageSet {
		body = askUsage(body) // the Responses API reports usage unasked, and takes no include_usage
	}
	if u.fallbck && u.cfg.Model != "" && req.model != u.cfg.Model {
		body = withModel(body, u.cfg.Model)
	}
	f := p.forward(w, r, u, body)
	f.ctx = clientCtx{f: f, r: r.Context()}
	defer f.finish()
	// The hard timeout, min(timeouts.hard, what is left of the deadline),
	// runs on the seat's own timer. The client hanging up cancels the
	// attempt too, unless the answer is an error status (see clientCtx).
	start := time.Now()
	pol := p.opts.Policy
	obs := seat.DoWithin(&f.ctx, u.readerFor(req), seat.Request{
		Prompt:       req.prompt,
		Body:         body, // what the transport sends: the seat builds none
		WaitCap:      pol.Budget.MaxWait,
		Slow5xxAfter: pol.Retry.SlowServerAfter,
	}, a.hard)
	cut := false
	switch obs.Outcome {
	case admit.Timeout, admit.WaitCap, admit.Cancelled, admit.Reset:
		cut = true
		if f.up != nil {
			f.up.abort()
		}
	default:
		if f.up != nil && !f.up.whole() {
			// The rest of the answer, past what the seat read, is
			// bounded by the same hard timeout.
			ctx, cancel := context.WithDeadline(&f.ctx, start.Add(a.hard))
			cut = f.rest(ctx)
			cancel()
		}
	}
	if req.model != "" && !u.fallbck {
		obs.Model = req.model
	}
	if a.j.shared {
		f.flush() // the client's last bytes go before a round trip to the books
	}
	ended := p.done(a, &obs)

	if !f.wrote {
		switch obs.Outcome {
		case admit.Cancelled:
			panic(http.ErrAbortHandler) // the client is gone: no answer, not even net/http's empty 200
		case admit.Timeout, admit.WaitCap:
			ref := refusal{status: http.StatusGatewayTimeout, code: string(obs.Outcome), final: ended,
				message: fmt.Sprintf("retrygate: %s after %s on seat %s (job %s)", obs.Detail, ledgerfile.FormatSeconds(obs.Elapsed)+"s", u.cfg.Name, a.j.id)}
			ref.write(w, p.kind)
		default:
			ref := refusal{status: http.StatusBadGateway, code: string(obs.Outcome), final: ended,
				message: fmt.Sprintf("retrygate: seat %s: %s (job %s)", u.cfg.Name, obs.Detail, a.j.id)}
			ref.write(w, p.kind)
		}
		return
	}
	if cut || f.failed() {
		panic(http.ErrAbortHandler) // the row is written: drop the client's connection
	}
}

// readerFor is the seat that times req's answer: the one reading its
// API's wire format.
func (u *upstream) readerFor(req *request) seat.Seat {
	if req.responses && u.responses != nil {
		return u.responses
	}
	return u.seat
}

// done takes a finished attempt into the books, writes its row and
// applies the retry rules. When they or the gate leave the job no next
// attempt (as the loop refuses before sleeping), the refusal is kept: the
// client's next request gets it and its row ends the job, so the SDK's
// own retry counter is on that row; a job whose client never asks again
// gets it when the proxy sweeps or stops. It reports whether a named job
// can have no next attempt.
func (p *Proxy) done(a *attempt, obs *seat.Observation) bool {
	ended := false
	// The client may be gone: the row is written all the same. Only a
	// shared book's round trip needs a bound.
	ctx := context.Background()
	if a.j.named && p.opts.Books != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bookTimeout)
		defer cancel()
	}
	_, err := p.withJob(ctx, a.j.id, a.j.named, a.j, func(j *job, now time.Time, out *rowOut) {
		ended = p.doneJob(j, a, obs, now, out)
	})
	if err != nil {
		p.opts.OnError(fmt.Errorf("the books of job %s: %w (its attempt %d's row is lost)", a.j.id, err, a.base.Attempt))
	}
	return ended
}

func (p *Proxy) doneJob(j *job, a *attempt, obs *seat.Observation, now time.Time, out *rowOut) bool {
	u := &p.seats[a.seat]
	j.land(a.base.Attempt)
	if obs.Billing == "" {
		obs.Billing = admit.BillingOf(obs.Outcome, obs.Elapsed, p.opts.Policy.Retry.SlowServerAfter)
	}
	cost, priced := u.cfg.Cost(obs.Usage())
	recordBreaker(u, now, obs)
	note := obs.Detail
	if a.probe {
		note = rehearse.JoinNote("half-open probe", note)
	}
	var row ledgerfile.Row
	rehearse.SentRow(&row, &a.base, &j.track, obs, cost, priced, note)
	rehearse.PriceCache(&row, u.cfg, obs)
	at := ledgerfile.AttemptOf(&row)
	j.take(&at)
	endRow(j, &row)
	out.add(&row, a.retry)
	if !j.named {
		// No later request can join this job: this row ended it.
		p.drop(j)
		return false // a retry is a job of its own: nothing to tell the client
	}
	switch obs.Outcome {
	case admit.OK:
		j.stepSet = false
		return false
	case admit.Cancelled:
		// The client left: it may come back under the same job.
		return false
	}
	j.step = admit.AfterFailure(p.opts.Policy.Retry, admit.Failure{
		Outcome: at.Outcome, Billing: at.Billing, RetryAfter: at.RetryAfter, HasRetry: at.HasRetryAfter,
	}, j.track.History(), nil)
	j.stepSet = true
	if j.inflight() > 0 {
		return false
	}
	spent := j.track.Spent()
	if !j.step.Retry {
		d := admit.Refuse(j.step.Reason)
		j.final = &d
		return true
	}
	next := a.seat
	if j.step.Fallback && next+1 < len(p.seats) {
		next++ // a timeout is retried at most once, and elsewhere
	}
	j.seat = next
	// A next attempt the gate must refuse whatever the client does (the
	// cap is reached, or too little of the deadline is left for the
	// estimate) ends the job now, as the loop refuses before sleeping.
	d := j.track.Before(p.opts.Policy.Budget, p.seats[next].cfg.Name, admit.AddDuration(spent.Time, ledgerfile.Resolution(max(now.Sub(j.start)-spent.Time, 0))), 0)
	if d.Final() {
		j.final = &d
		return true
	}
	return false
}

// closeJob writes the refusal row that ends j.
func (p *Proxy) closeJob(j *job, now time.Time, s int, d admit.Decision, spent admit.Spent, delay time.Duration, out *rowOut) {
	b := p.base(j, now, s, spent, delay, &request{})
	var row ledgerfile.Row
	rehearse.RefusalRow(&row, &b, &j.track, d)
	j.rows++
	endRow(j, &row)
	out.add(&row, "")
}

// sweep forgets in-process jobs past their deadline and retention.
func (p *Proxy) sweep(now time.Time) { p.expire(now) }

// sweepJob ends a job whose deadline is gone with the row that says so,
// unless it ended already; it reports (and marks) a job past its
// retention too, to be forgotten.
func (p *Proxy) sweepJob(j *job, now time.Time, out *rowOut) (forget bool) {
	if j.inflight() > 0 || now.Before(j.deadline) {
		return false
	}
	if j.end == "" {
		d := admit.Refuse(admit.ReasonDeadline)
		if j.final != nil {
			d = *j.final
		}
		p.closeJob(j, now, j.seat, d, j.track.Spent(), ledgerfile.Resolution(max(now.Sub(j.start)-j.track.Spent().Time, 0)), out)
	}
	j.forget = !now.Before(j.deadline.Add(p.opts.Retention))
	return j.forget
}

// Sweep ends and forgets old jobs at now, in process and in the shared
// books; the command calls it on a ticker.
func (p *Proxy) Sweep() {
	p.mu.Lock()
	p.sweep(p.opts.Now())
	p.mu.Unlock()
	if p.opts.Books != nil {
		p.sweepShared()
	}
}

// Close waits for the requests in flight (each is bounded by its hard
// timeout, so this ends), writes the row that ends every in-process job
// still open (refuse: cancelled, job_end cancelled, as the loop's
// Ctrl-C), and returns once every row is in the log. Jobs in shared books
// are left open: another proxy may serve their next request, and the
// sweep of any proxy on the store ends them at their deadline.
func (p *Proxy) Close() {
	p.wg.Wait()
	for i := range p.seats {
		if t, ok := p.seats[i].rt.(interface{ CloseIdleConnections() }); ok {
			t.CloseIdleConnections()
		}
	}
	defer p.q.close()
	defer p.events.close()
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.opts.Now()
	out := &rowOut{p: p}
	for _, j := range p.jobs {
		if j.end != "" {
			continue // its last row says how it ended
		}
		spent := j.track.Spent()
		delay := ledgerfile.Resolution(max(now.Sub(j.start)-spent.Time, 0))
		if j.final != nil {
			p.closeJob(j, now, j.seat, *j.final, spent, delay, out)
			continue
		}
		b := p.base(j, now, j.seat, spent, delay, &request{})
		var row ledgerfile.Row
		rehearse.RefusalRow(&row, &b, &j.track, admit.Refuse(reasonStopped))
		row.Outcome = admit.Cancelled
		row.Note = "proxy stopped before the job's next request"
		j.rows++
		row.JobEnd, j.end = ledgerfile.JobCancelled, ledgerfile.JobCancelled
		out.add(&row, "")
	}
}
