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
	retry string // the client's own retry counter
}

// admit runs the checks before forwarding, under the job's lock (see
// withJob): the retry rules after the job's last failure, the breakers
// along the chain, then the gate (admit.Track) on the job's spend and the
// seat's estimate. A refusal is written as its row and returned as the
// client's answer.
func (p *Proxy) admit(ctx context.Context, id string, named bool, req *request, retry string) (a *attempt, ref *refusal, err error) {
	busy, err := p.withJob(ctx, id, named, nil, func(j *job, now time.Time, out *rowOut) {
		a, ref = p.admitJob(j, now, req, retry, out)
	})
	if busy != nil {
		return nil, busy, err
	}
	return a, ref, err
}

func (p *Proxy) admitJob(j *job, now time.Time, req *request, retry string, out *rowOut) (*attempt, *refusal) {
	b := p.opts.Policy.Budget
	// The client's time between its requests (its backoff) is charged to
	// the deadline as the row's delay, so spent_s + delay_s is the time
	// since the job's first request, and a replay of the log sees the
	// same clock the gate saw.
	spent := j.track.Spent()
	delay := ledgerfile.Resolution(max(now.Sub(j.start)-spent.Time, 0))
	s := p.readySeat(j, now)
	refuse := func(d admit.Decision, st int) (*attempt, *refusal) {
		ab := p.base(j, now, st, spent, delay, req)
		var row ledgerfile.Row
		rehearse.RefusalRow(&row, &ab, &j.track, d)
		p.finishRefusal(j, &row, retry, out)
		return nil, p.refusalFor(j, d, now)
	}
	switch {
	case j.final != nil:
		return refuse(*j.final, j.seat)
	case j.stepSet && !j.step.Retry:
		d := admit.Refuse(j.step.Reason)
		j.final = &d
		return refuse(d, j.seat)
	case s < 0:
		return refuse(admit.Refuse(admit.ReasonBreakerOpen), j.seat)
	}
	u := &p.seats[s]
	reserve := p.reserve(u, req)
	d := p.gate(j, b, u.cfg.Name, admit.AddDuration(spent.Time, delay), reserve)
	if !d.Admit {
		if permanent(d) {
			j.final = &d
		}
		return refuse(d, s)
	}
	hard := min(p.opts.Policy.Timeouts.Hard, j.deadline.Sub(now))
	if hard <= 0 {
		d := admit.Refuse(admit.ReasonDeadline)
		j.final = &d
		return refuse(d, s)
	}
	j.seat = s
	probe := u.br.State(now) == admit.HalfOpen
	u.br.Allow(now)
	a := &attempt{j: j, seat: s, hard: hard, probe: probe, retry: retry}
	a.base = p.base(j, now, s, spent, delay, req)
	a.base.Reserve = reserve
	j.rows++
	j.flights = append(j.flights, flight{Attempt: a.base.Attempt, Until: now.Add(hard + flightGrace)})
	return a, nil
}

// gate is admit.Track's gate. With another request of the job still in
// flight, that attempt counts as used and its estimate as spent, so two
// concurrent requests cannot both take the last attempt; so does an
// attempt whose proxy died before its row (a shared book's lost one: the
// call may have been billed).
func (p *Proxy) gate(j *job, b admit.Budget, seat string, spentTime time.Duration, reserve float64) admit.Decision {
	held := j.inflight() + j.lost
	if held == 0 {
		return j.track.Before(b, seat, spentTime, reserve)
	}
	s := j.track.Spent()
	s.Time = spentTime
	n := j.track.Estimate(seat, reserve)
	for range held {
		s.Attempts = min(s.Attempts+1, admit.MaxAttempts)
		s.Tokens = admit.AddTokens(s.Tokens, n.Tokens)
		s.USD = admit.AddUSD(s.USD, n.USD)
	}
	return admit.Decide(b, s, n)
}

// permanent reports a refusal no later request of the job can undo:
// attempts, tokens and spend only grow, and the deadline only nears.
func permanent(d admit.Decision) bool {
	switch d.Reason {
	case admit.ReasonAttemptCap, admit.ReasonDeadline, admit.ReasonTokenCeiling, admit.ReasonSpendCeiling:
		return true
	}
	return false
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

// refusalFor is the client's answer to a refused request: 504 when the
// deadline is gone, else 503 with the reason; Retry-After only when the
// breaker's cooldown may let a later request through.
func (p *Proxy) refusalFor(j *job, d admit.Decision, now time.Time) *refusal {
	b := p.opts.Policy.Budget
	spent := j.track.Spent()
	r := &refusal{status: http.StatusServiceUnavailable, code: code(d.Reason), final: true}
	why := ""
	switch d.Reason {
	case admit.ReasonDeadline:
		r.status = http.StatusGatewayTimeout
		why = fmt.Sprintf("the job's %s deadline is gone", b.Deadline)
	case admit.ReasonAttemptCap:
		// Attempts in flight (and lost ones) count as used, as the gate counts them.
		why = fmt.Sprintf("the job used %d of %d attempts", min(spent.Attempts+j.inflight()+j.lost, admit.MaxAttempts), b.MaxAttempts)
	case admit.ReasonTokenCeiling:
		why = fmt.Sprintf("the job used %d of %d tokens", spent.Tokens, b.TokenCeiling)
	case admit.ReasonSpendCeiling:
		why = fmt.Sprintf("the job spent $%.4f of $%.4f", spent.USD, b.MaxSpendUSD)
	case admit.ReasonQueueWait:
		why = fmt.Sprintf("the seat's last wait is past the %s wait cap", b.MaxWait)
	case admit.ReasonBreakerOpen:
		r.final = false
		r.retryAfter = p.cooldownLeft(j.seat, now)
		why = "every seat's circuit breaker is open"
	case admit.ReasonPermanentError:
		why = "the last attempt failed for good (identical bytes fail identically)"
	case admit.ReasonRetryLimit:
		why = "the last failure's class has used its retries"
	}
	r.message = fmt.Sprintf("retrygate: %s for job %s: %s", rehearse.DecisionString(d), j.id, why)
	return r
}

func code(r admit.Reason) string {
	b := []byte(r)
	for i, c := range b {
		if c == ' ' {
			b[i] = '_'
		}
	}
	return string(b)
}

// finishRefusal writes a refused request's row (see endRow). A request
// naming no job is a job no later request can join: its one row ends
// it, and it is forgotten at once.
func (p *Proxy) finishRefusal(j *job, row *ledgerfile.Row, retry string, out *rowOut) {
	j.rows++
	endRow(j, row)
	if !j.named {
		p.drop(j)
	}
	out.add(row, retry)
}

// endRow is the one rule for a row's job_end, for every row the proxy
// writes: a job's last row in the log carries its end, and the proxy
// cannot know a row is the last, so a row carries the end the job has
// if no request of it follows, whenever that is known: with nothing of
// the job in flight, a success ends it succeeded; a refusal ends it as
// it stands (the end it already had, else its track's: failed when
// nothing was sent); a failed attempt ends it only when it had ended
// before (a row after a job's end must say the end again). A request
// naming no job ends at its one row. A later row of the job says its
// end again (report takes a job's end from its last such row).
func endRow(j *job, row *ledgerfile.Row) {
	if j.named && j.inflight() > 0 {
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
