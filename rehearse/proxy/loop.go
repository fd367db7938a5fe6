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

// This file is the policy's loop inside one request, driving the one job
// machine (admit.Job) as the rehearsal loop drives it: Before (the
// decision, the seat, the wait charged), the attempt through the seat's
// stopwatch, Settle (billing, cost, the breaker), the row, Take (the
// books, the retry rules, the next wait, the failover), then the wait,
// on a real timer the client's hang-up cancels, and Before again, until
// an answer is committed to the client or the job ends. Every upstream
// attempt is one row; every request's last row carries its job's end as
// it stands (a later request of a named job says it again).

// reasonStopped is the decision on the row that ends a job whose client
// left while the proxy waited between two of its attempts, as the loop's
// Ctrl-C.
const reasonStopped admit.Reason = "cancelled"

// errClientGone is the cause an attempt is cut with when its client hangs up.
var errClientGone = errors.New("proxy: the client hung up")

// call is one client request running its job.
type call struct {
	p     *Proxy
	w     http.ResponseWriter
	r     *http.Request
	in    *admitted
	f     *forward
	id    string
	chain admit.Chain
	seats []int // the chain's seats, as indexes of p.seats
	deps  []*deployment
	// m is the job machine: the in-process job's own, or the one the
	// job's shared book holds, resumed at each step (books.go).
	m  *admit.Job
	sh *shared
	// last is the provider's last answer in this request, whole (nil:
	// the last attempt had none, or it was too long to keep), and lastObs
	// that attempt's observation.
	last    *keptAnswer
	lastObs *seat.Observation
	first   bool // no decision made yet in this request
	// open: the attempt just sent was cut after its content went to the
	// client, whose stream is held open for a continuation (cont.go);
	// cont: the attempts from here on continue it.
	open, cont bool
	planAt     time.Time // when the attempt in flight was decided: its row's ts
}

// run serves one admitted generation request: it finds its job, takes
// the job's turn (a named job runs one request at a time), then runs the
// loop.
func (p *Proxy) run(w http.ResponseWriter, r *http.Request, in *admitted) {
	c := p.newCall(w, r, in)
	if c.sh != nil {
		c.loop()
		return
	}
	p.mu.Lock()
	j, ref := p.job(in.id, in.named, in.client, p.opts.Now())
	if ref != nil {
		p.mu.Unlock()
		// The job table is full: a limit, like --max-concurrent, refused
		// before any job's books; its row is a job of its own.
		p.refuse(w, r, *ref)
		return
	}
	j.users++
	p.mu.Unlock()
	defer p.leave(j)
	c.id, c.m = j.id, &j.m
	if !c.takeTurn(j) {
		return
	}
	defer func() { <-j.turn }()
	c.loop()
}

// newCall is request r, admitted as in, about to run its job: with the
// chain its model picks, and for a named job whose book is shared, its
// hold on the book (the job's machine comes from the book at each step).
func (p *Proxy) newCall(w http.ResponseWriter, r *http.Request, in *admitted) *call {
	idx := p.seatsFor(in.req.model)
	c := &call{p: p, w: w, r: r, in: in, f: newForward(w, r), first: true, seats: idx, deps: make([]*deployment, len(idx))}
	p.mu.Lock()
	c.chain = p.chain(&in.req, idx, c.deps)
	p.mu.Unlock()
	if in.named && p.opts.Books != nil {
		c.id, c.m = in.id, new(admit.Job)
		c.sh = &shared{owner: p.leaseOwner()}
	}
	return c
}

// turnGrace is how long past a job's deadline a request waits for the
// request of its job before it: every attempt ends by the deadline, and
// its row and answer's end take a moment more.
const turnGrace = 5 * time.Second

// takeTurn waits for the job's earlier request to end (bounded by the
// job's deadline and the client): false when it did not, answered.
func (c *call) takeTurn(j *job) bool {
	select {
	case j.turn <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(max(j.m.Deadline().Sub(c.p.opts.Now()), 0) + turnGrace)
	defer t.Stop()
	select {
	case j.turn <- struct{}{}:
		return true
	case <-c.r.Context().Done():
		panic(http.ErrAbortHandler) // gone before its turn: nothing was decided
	case <-t.C:
		// Every request of a job ends by its deadline: this one did not.
		// A limit, like --max-concurrent, refused before the job's books.
		c.p.refuse(c.w, c.r, refusal{status: http.StatusServiceUnavailable, reason: admit.ReasonProxyBusy, code: "job_busy", retryAfter: time.Second,
			message: fmt.Sprintf("retrygate: proxy busy: job %s's earlier request is still running past the job's deadline", j.id)})
		return false
	}
}

// leave is a request done with its job: a request naming no job is a
// job no later request can join, forgotten now.
func (p *Proxy) leave(j *job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	j.users--
	if !j.named && j.users == 0 {
		p.drop(j)
	}
}

// loop runs the job's attempts until an answer is committed or the job
// ends.
func (c *call) loop() {
	if c.p.opts.Shadow {
		c.shadow()
		return
	}
	for {
		if !c.waitDelay() {
			c.stopped()
			return
		}
		plan, ok := c.before()
		if !ok {
			return // the books are out of reach: answered
		}
		if !plan.Decision.Admit {
			c.fail(plan.Decision, plan.Spent)
			return
		}
		x, obs := c.send(&plan)
		mv, ok := c.after(&plan, x, &obs)
		if !ok {
			c.booksLost(x)
			return
		}
		switch {
		case x.committed && c.open:
			c.cont = true // the cut stream is continued by the next attempt
			x.end()
			continue
		case x.committed:
			if x.f.failed() || obs.Outcome != admit.OK {
				c.f.settle(true)
				panic(http.ErrAbortHandler) // the row says so: never a cut answer that looks whole
			}
			return
		case mv.Kind == admit.Ended:
			// A client that hung up: no answer, not even net/http's empty 200.
			panic(http.ErrAbortHandler)
		case mv.Kind == admit.Refused:
			c.fail(mv.Decision, mv.Spent)
			return
		}
		x.end()
	}
}

// waitDelay waits out what is left of the wait the retry rules set after
// the job's last failure (a Retry-After they honour, or the backoff): on
// a real timer, cancelled by the client hanging up (false). A client's
// own retry that comes sooner waits the rest here.
func (c *call) waitDelay() bool {
	left := c.m.Wait(&c.chain, c.p.opts.Now())
	if left <= 0 {
		return true
	}
	// The books keep an attempt's time as its row writes it, to the
	// millisecond, so what they say is left can be short of the real
	// wait by up to that much: one more unit, and a Retry-After is never
	// cut short (the provider saw 999.996 ms for Retry-After: 1).
	t := time.NewTimer(left + ledgerfile.WriteResolution)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.r.Context().Done():
		return false
	}
}

// before asks the machine for the job's next attempt, and writes the
// row of a refusal (it ends the request: its job's end is on it).
func (c *call) before() (admit.Plan, bool) {
	var plan admit.Plan
	err := c.books(func(m *admit.Job, now time.Time, out *rowOut) {
		p := c.p
		p.mu.Lock()
		c.chain.RetryGate = c.gate()
		ask := admit.Ask{Now: now, Waited: m.Waited(now), ClientRetry: c.first && c.in.clientRetry()}
		if c.cont {
			ask.Skip = func(s int) bool { return !c.up(s).cfg.Prefill }
		}
		plan = m.Before(&c.chain, ask)
		p.mu.Unlock()
		c.planAt = now
		if plan.Decision.Admit {
			b := c.base(plan.Attempt, plan.Seat, now, plan.Spent, plan.Delay, &plan)
			c.hold(now.Add(plan.Hard+flightGrace), &lease{Attempt: plan.Attempt, Seat: c.up(plan.Seat).cfg.Name, Base: b})
			return
		}
		c.hold(time.Time{}, nil)
		row := c.refusalRow(m, now, plan.Attempt, plan.Seat, plan.Decision, plan.Spent, plan.Delay, &plan)
		out.add(&row, c.in.retry)
	}, stepBefore)
	c.first = false
	if err != nil {
		c.booksLost(nil)
		return plan, false
	}
	return plan, true
}

// send makes the planned attempt: the request goes through the seat's
// stopwatch with this attempt's exchange as its transport, bounded by
// the plan's hard timeout and the wait cap (a first-token deadline);
// the answer is committed to the client when it is accepted (forward.go),
// and its end forwarded or kept.
func (c *call) send(plan *admit.Plan) (*exchange, seat.Observation) {
	p := c.p
	u := c.up(plan.Seat)
	body := c.bodyFor(plan.Seat)
	mark := 0
	if c.cont {
		mark = len(c.f.st.text)
		body = c.f.st.prefill(body)
		c.f.reopen()
	} else {
		c.f.st = c.stitchable()
	}
	c.open = false
	x := &exchange{f: c.f, u: u, body: body, cont: c.cont}
	s, _, _ := seat.WithTransport(u.readerFor(&c.in.req), func(http.RoundTripper) http.RoundTripper { return x })
	// The attempt's context ends with the client's, unless the answer is
	// an error status, whose (bounded) body is read to its end all the
	// same: the attempt failed with that status, it was not cancelled.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(c.r.Context()))
	defer cancel(nil)
	stop := context.AfterFunc(c.r.Context(), func() {
		if !x.errStatus.Load() {
			cancel(errClientGone)
		}
	})
	defer stop()
	pol := p.opts.Policy
	waitCap, stall := pol.Budget.MaxWait, pol.Timeouts.Stall
	if p.opts.Shadow {
		waitCap, stall = 0, 0 // a pass-through: no clock of the policy's cuts it
	}
	start := time.Now()
	obs := seat.DoWithin(ctx, s, seat.Request{
		Prompt:       c.in.req.prompt,
		Body:         body, // what the exchange sends: the seat builds none
		WaitCap:      waitCap,
		Slow5xxAfter: pol.Retry.SlowServerAfter,
		OnContent:    x.content,
		Stall:        stall, // no byte that long once the answer began: cut
	}, plan.Hard)
	until := start.Add(plan.Hard)
	cut := false
	switch {
	case x.status == 0:
		// No answer came (refused, cut before its headers): nothing to
		// forward or keep.
	case obs.Outcome == admit.Timeout || obs.Outcome == admit.WaitCap || obs.Outcome == admit.Cancelled || obs.Outcome == admit.Reset:
		cut = x.committed
		x.cancel()
	case x.committed || obs.Outcome == admit.OK:
		if !x.committed {
			x.commit(false) // a whole answer, or a stream with no content that ended well
		}
		// The rest of the answer, past what the seat read (a stream's
		// end after [DONE]), is bounded by the same hard timeout; an
		// answer the client did not get whole is not the row's ok.
		if err := x.rest(ctx, until); err != nil {
			cut = true
			cutShort(&obs, err, time.Since(start), pol.Retry.SlowServerAfter)
		}
	default:
		// A failure before anything went to the client: its answer is
		// read to its end (bounded) and kept, the provider's last answer
		// if no later attempt comes.
		_ = x.rest(ctx, until)
	}
	if x.committed {
		if cut {
			c.f.flush() // the client sees what came before the cut, then the cut
		}
		if cut && !c.f.failed() && c.f.st != nil && !c.f.st.other {
			// Held open: the next attempt may continue it (after).
			c.open = true
			c.f.st.prior.Prompt += obs.PromptTokens
			c.f.st.prior.Completion += obs.CompletionTokens
		} else {
			c.f.settle(cut || c.f.failed())
		}
	} else if c.cont {
		c.f.st.text = c.f.st.text[:mark] // none of it reached the client
	}
	obs.Model = c.model(plan.Seat)
	if x.dropped > 0 {
		obs.Detail = rehearse.JoinNote(obs.Detail, fmt.Sprintf("%d malformed stream events dropped, the rest forwarded", x.dropped))
	}
	if !x.committed {
		o := obs
		c.last, c.lastObs = x.kept(), &o
	}
	return x, obs
}

// stitchable is the stitch of a stream the proxy can continue when it is
// cut (cont.go): an OpenAI chat or Anthropic messages stream, on a chain
// with a seat that takes a prefill; nil for any other.
func (c *call) stitchable() *stitch {
	req := &c.in.req
	if c.p.opts.Shadow || !req.stream || req.responses || c.p.kind != "openai" && c.p.kind != "anthropic" || !c.prefillFrom(0) ||
		withPrefill(c.in.body, "", false) == nil {
		return nil // withPrefill: a body with no messages to continue
	}
	return &stitch{anthropic: c.p.kind == "anthropic"}
}

// prefillFrom says a seat of the chain from position pos on takes an
// assistant prefill: where a continuation may go (the machine's walk
// goes from the job's seat on, passing the others: Ask.Skip).
func (c *call) prefillFrom(pos int) bool {
	for ; pos < len(c.seats); pos++ {
		if c.up(pos).cfg.Prefill {
			return true
		}
	}
	return false
}

// up is the upstream at position pos of the call's chain.
func (c *call) up(pos int) *upstream { return &c.p.seats[c.seats[pos]] }

// model is the model the call sends to the seat at position pos of its chain.
func (c *call) model(pos int) string { return c.p.modelFor(c.seats[pos], pos, c.in.req.model) }

// bodyFor is the client's body as seat s gets it: asking an OpenAI
// stream for its usage, and naming a fallback seat's own model.
func (c *call) bodyFor(s int) []byte {
	p, req, body := c.p, &c.in.req, c.in.body
	if p.kind == "openai" && !req.responses && req.stream && !req.usageSet {
		body = askUsage(body) // the Responses API reports usage unasked, and takes no include_usage
	}
	if m := c.model(s); m != "" && m != req.model {
		body = withModel(body, m)
	}
	return body
}

// after settles the attempt and writes its row, then has the machine
// take it into the job's books: the next move. A refusal the machine
// makes now (a failure the rules do not retry, a wait the deadline
// cannot hold) is a row of its own, as the loop writes it.
func (c *call) after(plan *admit.Plan, x *exchange, obs *seat.Observation) (admit.Move, bool) {
	var mv admit.Move
	err := c.books(func(m *admit.Job, now time.Time, out *rowOut) {
		p := c.p
		a := admit.Attempt{Outcome: obs.Outcome, Billing: obs.Billing, Elapsed: obs.Elapsed}
		p.mu.Lock()
		priced, note := m.Settle(&c.chain, plan.Seat, now, &a, obs.Usage(), plan.Probe)
		p.mu.Unlock()
		obs.Billing = a.Billing
		var row ledgerfile.Row
		b := c.base(plan.Attempt, plan.Seat, c.planAt, plan.Spent, plan.Delay, plan)
		rehearse.SentRow(&row, &b, m.Track(), obs, a.USD, priced, rehearse.JoinNote(note, obs.Detail))
		rehearse.PriceCache(&row, &c.up(plan.Seat).cfg, obs)
		taken := ledgerfile.AttemptOf(&row)
		p.mu.Lock()
		mv = m.Take(&c.chain, plan.Seat, &taken, p.rng)
		p.mu.Unlock()
		ends := true // the request ends with this row (or the refusal after it)
		switch {
		case mv.Kind == admit.Ended:
			c.end(&row, mv.End)
		case c.open && mv.Kind == admit.Again && c.prefillFrom(mv.Seat) && c.r.Context().Err() == nil:
			ends = false // a cut stream, continued on a seat that takes a prefill
		case x.committed || c.r.Context().Err() != nil && mv.Kind == admit.Again:
			// The client has this answer's start and no retry can follow
			// it (a cut stream), or the client is gone: the request ends
			// here, and its last row says how the job stands.
			c.end(&row, m.End())
		case mv.Kind == admit.Again:
			ends = false
		}
		out.add(&row, c.in.retry)
		if !ends {
			c.hold(now.Add(mv.Delay+flightGrace), nil) // the job is this request's over the wait
		} else {
			c.hold(time.Time{}, nil)
		}
		if mv.Kind == admit.Refused {
			ref := c.refusalRow(m, now, mv.Attempt, mv.Seat, mv.Decision, mv.Spent, mv.Delay, nil)
			if mv.Delay > 0 {
				ref.Note = rehearse.JoinNote("refused before sleeping", ref.Note)
			}
			out.add(&ref, c.in.retry)
		}
	}, stepAfter)
	if mv.Kind != admit.Again || !c.prefillFrom(mv.Seat) || c.r.Context().Err() != nil {
		c.open = false // nothing continues it: the client's stream is cut
	}
	if err == nil && mv.Kind == admit.Again && c.r.Context().Err() != nil && !x.committed {
		mv.Kind = admit.Ended // the client left: nobody to retry for
	}
	return mv, err == nil
}

// stopped writes the row that ends a job whose client left while the
// proxy waited for its next attempt (as the loop's Ctrl-C), then drops
// the connection.
func (c *call) stopped() {
	_ = c.books(func(m *admit.Job, now time.Time, out *rowOut) {
		n := m.Number()
		row := c.refusalRow(m, now, n, m.Seat(), admit.Refuse(reasonStopped), m.Track().Spent(), m.Waited(now), nil)
		row.Outcome = admit.Cancelled
		row.Note = "the client left before this attempt"
		c.end(&row, ledgerfile.JobCancelled)
		out.add(&row, c.in.retry)
		c.hold(time.Time{}, nil)
	}, stepStop)
	panic(http.ErrAbortHandler)
}

// base is what a row of the job's attempt n on the chain's seat s
// carries before its numbers; plan is the one it was admitted or
// refused by (its retry budget window), nil for a refusal after an
// attempt.
func (c *call) base(n, s int, ts time.Time, spent admit.Spent, delay time.Duration, plan *admit.Plan) rehearse.RowBase {
	b := rehearse.RowBase{
		TS: ts, Job: c.id, Attempt: n, Seat: c.up(s).cfg.Name, Model: c.model(s),
		Delay: delay, Spent: spent, Fallback: s > 0, Reserve: c.chain.Seats[s].Reserve,
	}
	if plan != nil {
		b.Window, b.HasWindow, b.Widen = plan.Window, plan.HasWindow, plan.Widen
	}
	return b
}

// refusalRow is the row of attempt n refused before sending on seat s,
// carrying the job's end: a refusal ends the request.
func (c *call) refusalRow(m *admit.Job, now time.Time, n, s int, d admit.Decision, spent admit.Spent, delay time.Duration, plan *admit.Plan) ledgerfile.Row {
	var row ledgerfile.Row
	b := c.base(n, s, now, spent, delay, plan)
	rehearse.RefusalRow(&row, &b, m.Track(), d)
	c.end(&row, m.End())
	return row
}

// end writes the job's end on the last row of a request whose job no
// later request can join (one naming no job). A named job's client may
// send again, and its request continues the job: the proxy cannot know
// which of its rows is its last, so it writes none, and a reader ends
// the job as the writer would have (DESIGN.md, "A job, exactly").
func (c *call) end(row *ledgerfile.Row, end string) {
	if !c.in.named {
		row.JobEnd = end
	}
}

// fail answers a request whose job has no next attempt: 504 when the
// deadline is gone (or too little of it is left for the next attempt);
// else the provider's last answer as it came, when this request had one
// whole, or the proxy's own answer with the reason. Every such answer
// says x-should-retry: false: the proxy has retried what the policy
// retries.
func (c *call) fail(d admit.Decision, spent admit.Spent) {
	if c.cont {
		// The client has the cut stream's start: no answer, and never a
		// continuation's error (a prefill seat's 400), can follow it.
		c.f.settle(true)
		panic(http.ErrAbortHandler)
	}
	if d.Reason != admit.ReasonDeadline && c.last != nil {
		c.f.writeKept(c.last)
		return
	}
	c.refusalFor(d, spent).write(c.w, c.p.kind)
}

// booksLost answers a request whose job's shared books are out of reach:
// 503 books_unavailable. When nothing was decided (x nil: the step
// before an attempt failed), the refusal's row is a job of its own, as a
// limit's (see refuse), naming the job in for_job: it is written by the
// proxy's writer, held while the database is out of reach and written
// when it is back. After an attempt, its row is the one its lease in
// the book holds (lostRow), written once the lease expires. A book
// forgotten past its retention is no outage: 410 job_forgotten, as in
// process.
func (c *call) booksLost(x *exchange) {
	if x != nil {
		c.p.inLease.Add(1)
	}
	if c.r.Context().Err() != nil || (x != nil && x.committed) || c.cont {
		if x != nil && x.committed && !c.f.failed() && x.eof {
			return // the answer went out whole; only its row is lost
		}
		panic(http.ErrAbortHandler)
	}
	ref := refusal{status: http.StatusServiceUnavailable, reason: admit.ReasonProxyBusy, code: "books_unavailable", retryAfter: time.Second,
		message: "retrygate: the job's books are out of reach; nothing more was sent"}
	if x == nil && c.sh != nil && c.sh.forgotten {
		ref = forgottenJob(c.id, false)
	}
	if x == nil {
		c.p.refuse(c.w, c.r, ref)
		return
	}
	ref.write(c.w, c.p.kind)
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
