package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
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
			f.up.cancel()
		}
	default:
		// The rest of the answer, past what the seat read (a stream's
		// end after [DONE], an error body past the seat's bound), is
		// bounded by the same hard timeout; an answer the client did not
		// get whole is not the row's ok.
		if err := f.rest(&f.ctx, start.Add(a.hard)); err != nil {
			cut = true
			cutShort(&obs, err, time.Since(start), pol.Retry.SlowServerAfter)
		}
	}
	f.settle(cut && f.wrote)
	if req.model != "" && !u.fallbck {
		obs.Model = req.model
	}
	if a.j.shared && f.wrote {
		// The client's last bytes go before a round trip to the books (a
		// flush of nothing would send 200 headers before the 504 or 502).
		f.flush()
	}
	ended := p.done(a, &obs)

	if !f.wrote {
		f.unhead()
		ref := refusal{status: http.StatusBadGateway, code: string(obs.Outcome), final: ended,
			message: fmt.Sprintf("retrygate: seat %s: %s (job %s)", u.cfg.Name, obs.Detail, a.j.id)}
		switch obs.Outcome {
		case admit.Cancelled:
			panic(http.ErrAbortHandler) // the client is gone: no answer, not even net/http's empty 200
		case admit.Timeout, admit.WaitCap:
			ref.status = http.StatusGatewayTimeout
			ref.message = fmt.Sprintf("retrygate: %s after %s on seat %s (job %s)", obs.Detail, ledgerfile.FormatSeconds(obs.Elapsed)+"s", u.cfg.Name, a.j.id)
		}
		ref.write(w, p.kind)
		return
	}
	if cut || f.failed() {
		panic(http.ErrAbortHandler) // the row is written: drop the client's connection
	}
}

// cutShort is what the row says of an answer the seat had judged but the
// client did not get to its end: the upstream body broke off or was
// malformed after the seat's last read (a short body, a Content-Length
// longer than the body, a chunked body cut before its end) or stalled
// to the hard timeout, or a write to the client failed. An answer the
// seat took as ok becomes what happened (reset, timeout, cancelled);
// another keeps its class (a 429 is still the provider's 429), with the
// cut in its note. Either way its elapsed runs to the cut. A client that
// hangs up after the seat's last read (an SDK closes a stream at its
// data: [DONE]) had every byte the seat judged: the row keeps the
// seat's outcome and timing, with a note.
func cutShort(obs *seat.Observation, err error, elapsed, slowAfter time.Duration) {
	o, why := admit.Reset, "upstream body cut short after the seat's last read"
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		o, why = admit.Timeout, "hard timeout before the upstream body's end"
	case errors.Is(err, errClientWrite):
		o, why = admit.Cancelled, "the client left before the answer's end"
	case errors.Is(err, context.Canceled):
		obs.Detail = rehearse.JoinNote(obs.Detail, "the client left before the upstream body's end")
		return
	}
	if obs.Outcome == admit.OK {
		obs.Outcome, obs.Detail = o, why
	} else {
		obs.Detail = rehearse.JoinNote(obs.Detail, why)
	}
	obs.Elapsed = max(obs.Elapsed, elapsed)
	obs.Billing = admit.BillingOf(obs.Outcome, obs.Elapsed, slowAfter)
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
// applies the retry rules. It reports whether a named job can have no
// next attempt (ended: the refusal is kept for its next request).
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
	_, err := p.withJob(ctx, a.j.id, a.j.named, a.j.client, a.j, func(j *job, now time.Time, out *rowOut) {
		ended = p.doneJob(j, a, obs, now, out)
	})
	if err != nil {
		p.opts.OnError(fmt.Errorf("the books of job %s: %w (its attempt %d's row is lost)", a.j.id, err, a.base.Attempt))
	}
	return ended
}

func (p *Proxy) doneJob(j *job, a *attempt, obs *seat.Observation, now time.Time, out *rowOut) bool {
	u := &p.seats[a.seat]
	if obs.Billing == "" {
		obs.Billing = admit.BillingOf(obs.Outcome, obs.Elapsed, p.opts.Policy.Retry.SlowServerAfter)
	}
	cost, priced := u.cfg.Cost(obs.Usage())
	note := rehearse.RecordBreaker(u.br, now, obs, a.probe)
	sl := j.slot(a.base.Attempt)
	if sl == nil {
		// Another proxy on the shared books took it for lost (its hard
		// timeout and grace passed) and wrote its row: one row an attempt.
		p.opts.OnError(fmt.Errorf("job %s: attempt %d came back after its row was written as lost; its answer is not in the log", j.id, a.base.Attempt))
		return false
	}
	var row ledgerfile.Row
	// base.Reserve is set only when the seat was unobserved at the
	// decision: the row's reserve_usd is what the gate reserved then.
	rehearse.SentRow(&row, &a.base, &unobserved, obs, cost, priced, note)
	rehearse.PriceCache(&row, u.cfg, obs)
	sl.Row = &row
	p.release(j, out)
	return p.ended(j, now)
}

// unobserved is a job's books before any attempt: SentRow writes the
// reserve the decision made (RowBase.Reserve) as it stands.
var unobserved admit.Track

// ended reports whether a named job with nothing in flight can have no
// next attempt: the retry rules refuse one, or the gate must refuse it
// whatever the client does (the cap is reached, or too little of the
// deadline is left after the wait the retry rules set), as the loop
// refuses before sleeping. The client's answer then says not to retry;
// its next request gets the refusal, and that row ends the job, so the
// SDK's own retry counter is on it; a job whose client never asks again
// is ended when the proxy sweeps or stops.
func (p *Proxy) ended(j *job, now time.Time) bool {
	if !j.named || len(j.queue) > 0 || !j.stepSet {
		return false
	}
	d, _, _, _ := p.decide(j, now, j.seat, 0)
	if d.Final() || !j.step.Retry {
		j.final = &d
		return true
	}
	return false
}

// closeJob writes the refusal row that ends j: the gate's decision at
// now (decide), or def when the gate would let an attempt through.
func (p *Proxy) closeJob(j *job, now time.Time, def admit.Decision, out *rowOut) {
	d, spent, delay, held := p.decide(j, now, j.seat, 0)
	if d.Admit {
		d = def
	}
	b := p.base(j, now, j.seat, spent, delay, &request{})
	b.InFlight = held
	var row ledgerfile.Row
	rehearse.RefusalRow(&row, &b, &j.track, d)
	p.finishRefusal(j, &row, "", out)
}

// sweepJob ends a job whose deadline is gone with the row that says so,
// unless it ended already; it reports (and marks) a job past its
// retention too, to be forgotten.
func (p *Proxy) sweepJob(j *job, now time.Time, out *rowOut) (forget bool) {
	if j.inflight() > 0 || now.Before(j.deadline) {
		return false
	}
	if j.end == "" {
		p.closeJob(j, now, admit.Refuse(admit.ReasonDeadline), out)
	}
	j.forget = !now.Before(j.deadline.Add(p.opts.Retention))
	return j.forget
}

// Sweep ends and forgets old jobs at now, in process and in the shared
// books; the command calls it on a ticker.
func (p *Proxy) Sweep() {
	p.mu.Lock()
	p.expire(p.opts.Now()) // in-process jobs past their deadline and retention
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
		if j.final != nil {
			p.closeJob(j, now, *j.final, out)
			continue
		}
		spent := j.track.Spent()
		delay := ledgerfile.Resolution(max(now.Sub(j.start)-spent.Time, 0))
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
