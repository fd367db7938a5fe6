package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// This file is where a job's books live between its requests: in this
// process (the jobs map, under the proxy's lock), or, for named jobs when
// Options.Books is set, in a store several proxies share (PostgreSQL),
// which holds the job's lock across proxies while the one decision code
// (admitJob, doneJob, sweepJob) runs on the books it read, then keeps the
// books and the rows that decision wrote in one transaction.

// flightGrace is how long past its hard timeout an attempt in flight
// waits for its row in a shared book: longer than forwarding its last
// bytes and writing its row. Past it, the proxy that sent it is taken to
// be gone, and the next proxy to open the book writes the attempt's row
// for it: sent, outcome timeout (its outcome is unknown; the call may
// have been billed), elapsed its hard timeout, as an expired claim is
// counted. The books take it as any attempt, and the rows behind it go out.
const flightGrace = 30 * time.Second

// bookTimeout bounds one update of a shared book that no client waits on
// (an attempt's row, a sweep).
const bookTimeout = 20 * time.Second

// slot is one attempt of a job, numbered when it was decided, whose row
// is not written yet (see release). A sent one is in flight until its row
// comes (Row set); the gate counts it as used, with its estimate as spent.
type slot struct {
	Attempt int              `json:"attempt"`
	Seat    int              `json:"-"` // the chain index it was sent to (Base.Seat names it)
	Sent    bool             `json:"sent,omitempty"`
	Until   time.Time        `json:"until,omitzero"` // sent: its hard timeout + flightGrace
	Base    rehearse.RowBase `json:"base,omitzero"`  // sent: its row's numbers at the decision
	Row     *ledgerfile.Row  `json:"row,omitempty"`
	Retry   string           `json:"retry,omitempty"` // the client's own retry counter
}

// book is a job's books as a shared store keeps them. The track is not
// stored: it is rebuilt from the attempts it took, in order, so the
// estimate and the retry history are admit.Track's own.
type book struct {
	Start    time.Time        `json:"start"`
	Deadline time.Time        `json:"deadline"`
	Sent     []admit.Attempt  `json:"sent,omitempty"`
	Step     *admit.RetryStep `json:"step,omitempty"`
	Final    *admit.Decision  `json:"final,omitempty"`
	Seat     string           `json:"seat,omitempty"`
	Rows     int              `json:"rows"`
	Queue    []slot           `json:"queue,omitempty"` // rows not yet written, in attempt order
	Ended    bool             `json:"ended,omitempty"`
	End      string           `json:"end,omitempty"` // the job_end its last row with one carried
}

// rowOut takes the rows a decision writes: straight to the row queue
// (in-process books, under the proxy's lock, so a job's rows keep their
// order), or gathered to be stored with a shared book.
type rowOut struct {
	p    *Proxy
	rows []ledgerfile.Row // gathered, when p is nil
}

func (o *rowOut) add(row *ledgerfile.Row, retry string) {
	if retry != "" {
		row.Extra = append(row.Extra, ledgerfile.KV{Key: KeyClientRetry, Value: retry})
	}
	if o.p != nil {
		o.p.q.add(row)
		return
	}
	o.rows = append(o.rows, *row)
}

// jobFn is a decision on a job's books at now; rows go to out.
type jobFn func(j *job, now time.Time, out *rowOut)

// withJob runs fn on the books of the job named id (known, when the
// caller holds it in process; a new job of client's when id is "" or
// unknown) under the job's lock. It returns a refusal when no job can be
// opened.
func (p *Proxy) withJob(ctx context.Context, id string, named bool, client string, known *job, fn jobFn) (*refusal, error) {
	if named && p.opts.Books != nil {
		return nil, p.withShared(ctx, id, false, known == nil, fn)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.opts.Now()
	j := known
	if j == nil {
		var ref *refusal
		if j, ref = p.job(id, named, client, now); ref != nil {
			return ref, nil
		}
	}
	fn(j, now, &p.queued)
	return nil, nil
}

// withShared runs fn on a shared book. A sweep (sweeping) never makes a
// job: a key another proxy forgot meanwhile is left forgotten.
//
// An admission (a request about to be judged) under a retry budget also
// locks the budget's shared record (budgetKey), in the same transaction:
// proxies that share books share the budget, and a retry's count and its
// row commit together.
func (p *Proxy) withShared(ctx context.Context, id string, sweeping, admission bool, fn jobFn) error {
	book := func(old, sharedOld []byte, now time.Time, shared bool) (store.Record, []byte, []ledgerfile.Row, error) {
		if old == nil && sweeping {
			return store.Record{}, nil, nil, nil
		}
		j, err := p.openBook(id, old, now)
		if err != nil {
			return store.Record{}, nil, nil, err
		}
		var state admit.BudgetState
		if shared && sharedOld != nil {
			if err := json.Unmarshal(sharedOld, &state); err != nil {
				return store.Record{}, nil, nil, fmt.Errorf("the shared retry budget is unreadable: %w", err)
			}
		}
		out := rowOut{}
		p.mu.Lock() // the breakers and the seat chain are this proxy's own
		own := p.budget
		if shared {
			p.budget = admit.RestoreBudget(p.opts.Policy.Retry.Budget, state)
		}
		p.lostRows(j, now, &out)
		fn(j, now, &out)
		var budget []byte
		if shared {
			budget, err = json.Marshal(p.budget.State(now))
			p.budget = own
		}
		p.mu.Unlock()
		if err != nil {
			return store.Record{}, nil, nil, err
		}
		if j.forget {
			return store.Record{}, budget, out.rows, nil
		}
		data, err := json.Marshal(p.bookOf(j))
		due := j.deadline
		if j.end != "" {
			due = j.deadline.Add(p.opts.Retention)
		}
		return store.Record{Data: data, Due: due}, budget, out.rows, err
	}
	if admission && p.opts.Policy.Retry.Budget.Enabled() {
		return p.opts.Books.BookShared(ctx, id, budgetKey, func(old, sharedOld []byte, now time.Time) (store.Record, []byte, []ledgerfile.Row, error) {
			return book(old, sharedOld, now, true)
		})
	}
	return p.opts.Books.Book(ctx, id, func(old []byte, now time.Time) (store.Record, []ledgerfile.Row, error) {
		rec, _, rows, err := book(old, nil, now, false)
		return rec, rows, err
	})
}

// budgetKey is the retry budget's record in shared books: a space, so
// never a job id (printable ASCII without spaces).
const budgetKey = "retry budget"

// openBook is a job from its shared book, or a new one made at now (its
// deadline is made here, once, and every proxy inherits it).
func (p *Proxy) openBook(id string, old []byte, now time.Time) (*job, error) {
	j := &job{id: id, named: true, shared: true}
	if old == nil {
		j.start, j.deadline = now, now.Add(p.opts.Policy.Budget.Deadline)
		return j, nil
	}
	var b book
	if err := json.Unmarshal(old, &b); err != nil {
		return nil, fmt.Errorf("the books of job %s are unreadable: %w", id, err)
	}
	j.start, j.deadline, j.rows, j.end, j.final, j.queue = b.Start, b.Deadline, b.Rows, b.End, b.Final, b.Queue
	for i := range b.Sent {
		j.take(&b.Sent[i])
	}
	if b.Ended && j.end == "" {
		j.end = j.track.End() // a book an older proxy kept
	}
	if b.Step != nil {
		j.step, j.stepSet = *b.Step, true
	}
	j.seat = p.seatIndex(b.Seat)
	for i := range j.queue {
		j.queue[i].Seat = p.seatIndex(j.queue[i].Base.Seat)
	}
	return j, nil
}

func (p *Proxy) seatIndex(name string) int {
	for s := range p.seats {
		if p.seats[s].cfg.Name == name {
			return s
		}
	}
	return 0
}

// lostRows writes the rows of the job's attempts whose proxy is gone
// (past their hard timeout and flightGrace; see flightGrace), then the
// rows that were waiting behind them.
func (p *Proxy) lostRows(j *job, now time.Time, out *rowOut) {
	lost := false
	for i := range j.queue {
		sl := &j.queue[i]
		if !sl.Sent || sl.Row != nil || now.Before(sl.Until) {
			continue
		}
		hard := sl.Until.Sub(sl.Base.TS) - flightGrace
		obs := seat.Observation{Outcome: admit.Timeout, Elapsed: hard, Wait: hard,
			Billing: admit.BillingOf(admit.Timeout, hard, p.opts.Policy.Retry.SlowServerAfter)}
		var row ledgerfile.Row
		rehearse.SentRow(&row, &sl.Base, &unobserved, &obs, 0, false,
			"lost: the proxy that sent it stopped before its row; its outcome is unknown")
		sl.Row = &row
		lost = true
	}
	if lost {
		p.release(j, out)
	}
}

func (p *Proxy) bookOf(j *job) *book {
	b := &book{Start: j.start, Deadline: j.deadline, Sent: j.sent, Final: j.final,
		Seat: p.seats[j.seat].cfg.Name, Rows: j.rows, Queue: j.queue, Ended: j.end != "", End: j.end}
	if j.stepSet {
		b.Step = &j.step
	}
	return b
}

// take takes a sent attempt into the job's track; a shared book keeps
// the attempt to rebuild the track from.
func (j *job) take(a *admit.Attempt) {
	j.track.Sent(a)
	if j.shared {
		j.sent = append(j.sent, *a)
	}
}

// inflight is how many of the job's attempts are sent with no row yet.
func (j *job) inflight() int {
	n := 0
	for i := range j.queue {
		if j.queue[i].Sent && j.queue[i].Row == nil {
			n++
		}
	}
	return n
}

// held is how many of the job's sent attempts its books have not taken:
// in flight, or landed behind one that is.
func (j *job) held() int {
	n := 0
	for i := range j.queue {
		if j.queue[i].Sent {
			n++
		}
	}
	return n
}

// slot is the queued attempt numbered n, or nil.
func (j *job) slot(n int) *slot {
	for i := range j.queue {
		if j.queue[i].Attempt == n {
			return &j.queue[i]
		}
	}
	return nil
}

// sweepShared ends and forgets the shared jobs whose time has come, as
// sweep does the in-process ones; any proxy on the store may do it, and
// each job is swept once.
func (p *Proxy) sweepShared() {
	ctx, cancel := context.WithTimeout(context.Background(), bookTimeout)
	defer cancel()
	keys, err := p.opts.Books.Due(ctx, 256)
	if err != nil {
		p.opts.OnError(fmt.Errorf("sweeping the shared books: %w", err))
		return
	}
	for _, k := range keys {
		if err := p.withShared(ctx, k, true, false, func(j *job, now time.Time, out *rowOut) { p.sweepJob(j, now, out) }); err != nil {
			p.opts.OnError(fmt.Errorf("sweeping the shared books: %w", err))
			return
		}
	}
}
