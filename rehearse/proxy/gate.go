package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// reasonStopped is the decision on the row that closes a job the proxy
// stopped (SIGTERM) between two of its requests, as the loop's Ctrl-C.
const reasonStopped admit.Reason = "cancelled"

// attempt is one admitted request between the gate and its row.
type attempt struct {
	j     *job
	seat  int
	base  rehearse.RowBase
	hard  time.Duration
	probe bool
}

// admit runs the checks before forwarding, under the job's lock (see
// withJob): the retry rules after the job's last failure, the breakers
// along the chain, then the gate (admit.Track) on the job's spend and the
// seat's estimate. A refusal is written as its row and returned as the
// client's answer.
func (p *Proxy) admit(ctx context.Context, id string, named bool, client string, req *request, retry string) (a *attempt, ref *refusal, err error) {
	busy, err := p.withJob(ctx, id, named, client, nil, func(j *job, now time.Time, out *rowOut) {
		a, ref = p.admitJob(j, now, req, retry, out)
	})
	if busy != nil {
		return nil, busy, err
	}
	return a, ref, err
}

func (p *Proxy) admitJob(j *job, now time.Time, req *request, retry string, out *rowOut) (*attempt, *refusal) {
	s := p.readySeat(j, now)
	st := s
	if s < 0 {
		st = j.seat // every breaker open: the row is the job's own seat's
	}
	u := &p.seats[st]
	reserve := p.reserve(u, req)
	d, spent, delay, held := p.decide(j, now, st, reserve)
	if s < 0 && !(j.stepSet && !j.step.Retry) {
		d = admit.Refuse(admit.ReasonBreakerOpen)
	}
	hard := min(p.opts.Policy.Timeouts.Hard, j.deadline.Sub(now))
	if d.Admit && hard <= 0 {
		// Less than the log's resolution is left: the gate saw a
		// millisecond that the clock has already spent.
		d = admit.Refuse(admit.ReasonDeadline)
	}
	base := p.base(j, now, st, spent, delay, req)
	base.InFlight = held
	if !j.track.Observed(u.cfg.Name) {
		base.Reserve = reserve // the row's reserve_usd: what the gate reserved
	}
	// Last, the retry budget (under p.mu, across jobs): a retry everything
	// else admits, when the retries of every job are over it; its counts
	// go on the row, for the replay. A first attempt only counts.
	again := base.Attempt >= 2
	if d.Admit && again && p.opts.Policy.Retry.Budget.Enabled() {
		d, base.Window = p.budget.Decide(d, true, now)
		base.HasWindow = true
	}
	if !d.Admit {
		var row ledgerfile.Row
		rehearse.RefusalRow(&row, &base, &j.track, d)
		p.finishRefusal(j, &row, retry, out)
		return nil, p.refusalFor(j, d, now, spent)
	}
	p.budget.Sent(now, again)
	j.seat = s
	probe := u.br.State(now) == admit.HalfOpen
	u.br.Allow(now)
	a := &attempt{j: j, seat: s, hard: hard, probe: probe, base: base}
	j.rows++
	j.queue = append(j.queue, slot{Attempt: base.Attempt, Seat: s, Sent: true, Until: now.Add(hard + flightGrace), Base: base, Retry: retry})
	return a, nil
}

// decide is the gate on the job's next attempt on seat s at now, the one
// rule for every decision the proxy writes (an admission, a refusal, the
// row that closes a job): the retry rules after the job's last failure,
// then admit.Track's gate on its books, with the attempts of it still in
// flight counted as used and their estimates as spent (so concurrent
// requests cannot both take the last attempt), and the wait before this
// one charged to the deadline: the client's time since the job's books
// last moved, or the delay the retry rules set (a Retry-After they
// honour: RetryStep.Charged) when that is longer, as the loop sleeps it.
// It returns the spend the decision was made on, the charged wait (the
// row's delay_s) and the attempts in flight (its inflight): a replay of
// the row (ledgerfile.JobGate) decides on exactly those.
func (p *Proxy) decide(j *job, now time.Time, s int, reserve float64) (d admit.Decision, spent admit.Spent, delay time.Duration, held int) {
	t := j.track.Spent().Time
	delay = ledgerfile.Resolution(max(now.Sub(j.start)-t, 0))
	if j.stepSet {
		delay = ledgerfile.Resolution(j.step.Charged(delay))
	}
	held = j.held()
	d, spent = j.track.BeforeHeld(p.opts.Policy.Budget, p.seats[s].cfg.Name, admit.AddDuration(t, delay), reserve, held)
	if j.stepSet && !j.step.Retry {
		d = admit.RefuseFirst(j.step.Reason, d)
	}
	return d, spent, delay, held
}

// readySeat is the first seat from the job's own whose breaker lets a
// request through, or -1.
func (p *Proxy) readySeat(j *job, now time.Time) int {
	for s := j.seat; s < len(p.seats); s++ {
		if p.seats[s].br.Ready(now) {
			return s
		}
	}
	return -1
}

// reserve is what the job's first attempt on u reserves under a spend
// ceiling: price × (the prompt counted locally + the request's max
// tokens). A request without max tokens reserves its prompt only.
func (p *Proxy) reserve(u *upstream, req *request) float64 {
	if !u.priced || !p.opts.Policy.Budget.HasSpendCeiling() {
		return 0
	}
	return admit.Reservation(u.cfg.Prices(), seat.PromptTokens(u.cfg, req.prompt), req.maxTokens)
}

func (p *Proxy) base(j *job, now time.Time, s int, spent admit.Spent, delay time.Duration, req *request) rehearse.RowBase {
	u := &p.seats[s]
	model := req.model
	if model == "" || u.fallbck {
		model = u.cfg.Model
	}
	return rehearse.RowBase{
		TS: now, Job: j.id, Attempt: j.rows + 1, Seat: u.cfg.Name, Model: model,
		Delay: delay, Spent: spent, Fallback: u.fallbck,
	}
}

// refusalFor is the client's answer to a refused request, on the spend
// its decision was made on: 504 when the deadline is gone (or too little
// of it is left for the next attempt after the wait the retry rules set),
// else 503 with the reason; Retry-After only when a later request may be
// let through: an open breaker's cooldown, or the rest of the wait the
// retry rules set after the job's last failure when that is longer.
func (p *Proxy) refusalFor(j *job, d admit.Decision, now time.Time, spent admit.Spent) *refusal {
	b := p.opts.Policy.Budget
	r := &refusal{status: http.StatusServiceUnavailable, code: strings.ReplaceAll(string(d.Reason), " ", "_"), final: true}
	why := ""
	switch d.Reason {
	case admit.ReasonDeadline:
		r.status = http.StatusGatewayTimeout
		switch {
		case !now.Before(j.deadline):
			why = fmt.Sprintf("the job's %s deadline is gone", b.Deadline)
		case j.stepSet && j.step.Delay > 0:
			why = fmt.Sprintf("too little of the job's %s deadline is left after the %s wait its last failure asks (Retry-After)",
				b.Deadline, ledgerfile.FormatSeconds(j.step.Delay)+"s")
		default:
			why = fmt.Sprintf("too little of the job's %s deadline is left for the next attempt", b.Deadline)
		}
	case admit.ReasonAttemptCap:
		// Attempts in flight count as used, as the gate counts them.
		why = fmt.Sprintf("the job used %d of %d attempts", spent.Attempts, b.MaxAttempts)
	case admit.ReasonTokenCeiling:
		why = fmt.Sprintf("the job used %d of %d tokens", spent.Tokens, b.TokenCeiling)
	case admit.ReasonSpendCeiling:
		why = fmt.Sprintf("the job spent $%.4f of $%.4f", spent.USD, b.MaxSpendUSD)
	case admit.ReasonQueueWait:
		why = fmt.Sprintf("the seat's last wait is past the %s wait cap", b.MaxWait)
	case admit.ReasonBreakerOpen:
		r.final = false
		r.retryAfter = max(p.cooldownLeft(j.seat, now), p.waitLeft(j, now))
		why = "every seat's circuit breaker is open"
	case admit.ReasonPermanentError:
		why = "the last attempt failed for good (identical bytes fail identically)"
	case admit.ReasonRetryLimit:
		why = "the last failure's class has used its retries"
	case admit.ReasonRetryBudget:
		// Final: the SDK is told not to retry, which is the point of a
		// budget (a later request of the job is judged again).
		cfg := p.opts.Policy.Retry.Budget
		why = fmt.Sprintf("the retries of every job are over the retry budget (%g of first attempts + %g/s over %s)",
			cfg.Ratio, cfg.MinPerSecond, cfg.Window)
	}
	r.message = fmt.Sprintf("retrygate: %s for job %s: %s", d.String(), j.id, why)
	return r
}

// waitLeft is what is left of the wait the retry rules set after the
// job's last failure (RetryStep.Charged: a Retry-After they honour) at now.
func (p *Proxy) waitLeft(j *job, now time.Time) time.Duration {
	if !j.stepSet {
		return 0
	}
	waited := max(now.Sub(j.start)-j.track.Spent().Time, 0)
	return j.step.Charged(waited) - waited
}

// finishRefusal writes a refused request's row, behind the rows of the
// job's attempts in flight (see release).
func (p *Proxy) finishRefusal(j *job, row *ledgerfile.Row, retry string, out *rowOut) {
	j.rows++
	r := *row
	j.queue = append(j.queue, slot{Attempt: row.Attempt, Row: &r, Retry: retry})
	p.release(j, out)
}

// release writes the job's rows that are ready, in attempt order: a
// refusal at once, unless attempts numbered before it are in flight; a
// sent attempt's row when it has landed and every row before it is out.
// A sent attempt is taken into the job's books here, in that order, so
// the books are always its first attempts (a replay reads rows in that
// order): a decision made with attempts in flight is made on the books
// without them, and its row says how many (inflight). The retry rules
// judge the job's last attempt taken. A request naming no job is a job no
// later request can join: its one row ends it, and it is forgotten then.
func (p *Proxy) release(j *job, out *rowOut) {
	n := 0
	for ; n < len(j.queue); n++ {
		sl := &j.queue[n]
		if sl.Sent && sl.Row == nil {
			break // in flight
		}
		if sl.Sent {
			at := ledgerfile.AttemptOf(sl.Row)
			j.take(&at)
			p.afterTaken(j, sl.Seat, &at)
		}
		endRow(j, sl.Row, len(j.queue)-n-1)
		out.add(sl.Row, sl.Retry)
	}
	j.queue = append(j.queue[:0], j.queue[n:]...)
	if !j.named && len(j.queue) == 0 {
		p.drop(j)
	}
}

// afterTaken applies the retry rules to a sent attempt the books took,
// as a replay of its row does (ledgerfile.JobGate): a success clears
// them; a client that hung up may come back under the same job, so a
// cancelled attempt leaves them as they were; any other failure is
// judged by admit.Track.Retry, and a retry the rules send elsewhere moves
// the job to the next seat.
func (p *Proxy) afterTaken(j *job, s int, at *admit.Attempt) {
	if !j.named {
		return
	}
	switch at.Outcome {
	case admit.OK:
		j.stepSet = false
		return
	case admit.Cancelled:
		return
	}
	j.step, j.stepSet = j.track.Retry(p.opts.Policy.Retry, at, nil), true
	if j.step.Retry && j.step.Fallback && s+1 < len(p.seats) {
		j.seat = max(j.seat, s+1) // a timeout is retried at most once, and elsewhere
	}
}

// endRow is the one rule for a row's job_end, for every row the proxy
// writes: a job's last row in the log carries its end, and the proxy
// cannot know a row is the last, so a row carries the end the job has
// if no request of it follows, whenever that is known: with no row of
// the job behind it (after: the rows still to come of its decided attempts), a success ends it succeeded; a refusal ends it as
// it stands (the end it already had, else its track's: failed when
// nothing was sent); a failed attempt ends it only when it had ended
// before (a row after a job's end must say the end again). A request
// naming no job ends at its one row. A later row of the job says its
// end again (report takes a job's end from its last such row).
func endRow(j *job, row *ledgerfile.Row, after int) {
	if !row.Unsent && row.Outcome == admit.OK && after > 0 && j.named {
		// The job has succeeded whatever follows: the rows behind this
		// one (its requests decided while this attempt was in flight)
		// say so.
		j.end = ledgerfile.JobSucceeded
		return
	}
	if j.named && after > 0 {
		return
	}
	switch {
	case !row.Unsent && row.Outcome == admit.OK:
		row.JobEnd = ledgerfile.JobSucceeded
	case !row.Unsent && (j.end != "" || !j.named):
		row.JobEnd = j.track.End()
	case row.Unsent && j.end != "":
		row.JobEnd = j.end
	case row.Unsent:
		row.JobEnd = j.track.End()
	default:
		return
	}
	j.end = row.JobEnd
}
