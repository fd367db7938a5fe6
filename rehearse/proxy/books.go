package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// This file is where a job's machine lives between the steps of its
// loop: in this process (the job table; the job's turn orders its
// steps), or, for named jobs when Options.Books is set, in a book
// several proxies share (PostgreSQL), which holds the job's lock across
// proxies while a step runs on the machine it holds, then keeps the
// machine and the rows the step wrote in one transaction. One request of
// a job runs at a time there too: the request running it holds a lease
// in its book, from its first decision to its last row, renewed at each
// step; a lease whose holder is gone (past its attempt's hard timeout
// and flightGrace) is taken over, and the attempt it had in flight
// written as lost.

// flightGrace is how long past an attempt's hard timeout (or past the
// wait before the next one) a lease holds: longer than forwarding the
// answer's last bytes and writing its row. Past it, the proxy that held
// it is taken to be gone, and the next to open the book writes the row
// of the attempt it had in flight: sent, outcome timeout (its outcome is
// unknown; the call may have been billed), elapsed its hard timeout, as
// an expired claim is counted.
const flightGrace = 30 * time.Second

// bookTimeout bounds one step's round trip to a shared book.
const bookTimeout = 20 * time.Second

// leasePoll bounds how long a request waiting for another's lease
// sleeps before it asks the book again.
const leasePoll = 100 * time.Millisecond

// rowOut gathers the rows one step writes, in order: to the log queue
// after the step (in process), or into the shared book's transaction.
type rowOut struct {
	rows []ledgerfile.Row
}

func (o *rowOut) add(row *ledgerfile.Row, retry string) {
	if retry != "" {
		row.Extra = append(row.Extra, ledgerfile.KV{Key: KeyClientRetry, Value: retry})
	}
	o.rows = append(o.rows, *row)
}

// emit queues rows for the log, in order.
func (p *Proxy) emit(rows []ledgerfile.Row) {
	for i := range rows {
		p.q.add(&rows[i])
	}
}

// step is a step of the loop on the job's machine at now; its rows go
// to out.
type step func(m *admit.Job, now time.Time, out *rowOut)

// stepKind says what a step does to a shared book's lease.
type stepKind uint8

const (
	stepBefore stepKind = iota // a decision: takes the lease (waiting for another's), holds it while an admitted attempt runs
	stepAfter                  // an attempt's end: holds the lease over the wait when the job goes on
	stepStop                   // the client left: the lease goes
)

// shared is a request's hold on its job's shared book.
type shared struct {
	owner string
	// lease is what the lease holds after the step being run (set by the
	// steps: see hold); nil releases it.
	lease *lease
	// gate is the retry budget as the shared record held it, for the
	// decision being made.
	gate *admit.RetryBudget
	// forgotten: the job's book was forgotten (errForgotten).
	forgotten bool
}

// book is a job's machine as a shared store keeps it (admit.JobState:
// the books are rebuilt from the attempts they took, in order, so the
// estimate and the retry history are the machine's own), and the lease
// of the request running it.
type book struct {
	admit.JobState
	Lease *lease `json:"lease,omitempty"`
	// Forgotten: the job's books were forgotten at its deadline plus the
	// retention; its name is kept (forgottenBook), never due again, so
	// no proxy starts the job again at attempt 1, a second row for
	// (job, 1) that the log refuses after the attempt was sent.
	Forgotten bool `json:"forgotten,omitempty"`
}

// forgottenBook is what a job's shared book becomes when it is forgotten.
var forgottenBook = []byte(`{"forgotten":true}`)

// errForgotten is a step on a book forgotten (book.Forgotten): the
// request is refused as one naming a job forgotten in process.
var errForgotten = errors.New("the job was forgotten past its deadline and retention")

// lease is the one request running a job, across proxies.
type lease struct {
	Owner string    `json:"owner"`
	Until time.Time `json:"until"`
	// Attempt is the attempt in flight under the lease (0: none, its
	// holder waits between attempts), on Seat, whose row would carry
	// Base: a lost attempt's row is written from it.
	Attempt int              `json:"attempt,omitempty"`
	Seat    string           `json:"seat,omitempty"`
	Base    rehearse.RowBase `json:"base,omitzero"`
}

var leases atomic.Uint64

// leaseOwner names one request's lease, unique across proxies (the
// process's start and a counter).
func (p *Proxy) leaseOwner() string {
	return strconv.FormatInt(processStart, 36) + "-" + strconv.FormatUint(leases.Add(1), 36)
}

var processStart = time.Now().UnixNano()

// hold sets what the request's lease holds after the step: until, with
// the attempt in flight (nil: none); a zero until releases it.
func (c *call) hold(until time.Time, inFlight *lease) {
	if c.sh == nil {
		return
	}
	if until.IsZero() {
		c.sh.lease = nil
		return
	}
	l := &lease{Owner: c.sh.owner, Until: until}
	if inFlight != nil {
		l.Attempt, l.Seat, l.Base = inFlight.Attempt, inFlight.Seat, inFlight.Base
	}
	c.sh.lease = l
}

// gate is the retry budget a decision of the call asks (under p.mu):
// nil without one.
func (c *call) gate() admit.RetryGate {
	if !c.p.opts.Policy.Retry.Budget.Enabled() {
		return nil
	}
	if c.sh != nil && c.sh.gate != nil {
		return c.sh.gate
	}
	return c.p.budget
}

// books runs one step of the loop on the job's machine: in process at
// once (the job's turn orders the steps), its rows to the log; in a
// shared book in one transaction with its rows.
func (c *call) books(fn step, kind stepKind) error {
	if c.sh == nil {
		out := rowOut{}
		fn(c.m, c.p.opts.Now(), &out)
		c.p.emit(out.rows)
		return nil
	}
	return c.sharedStep(fn, kind)
}

// errLeaseLost is a step of a request whose lease another proxy took
// over (its attempt outlived the grace): its rows are the other's now.
var errLeaseLost = errors.New("the job's lease passed to another proxy; this attempt was written as lost")

// sharedStep runs fn on the job's shared book. A decision whose job
// another request holds waits (polling the book, bounded by the client
// and the job's deadline) until that request ends or its lease expires.
func (c *call) sharedStep(fn step, kind stepKind) error {
	p := c.p
	for {
		var wait time.Duration
		var deadline time.Time
		own := false // the wait is the job's own (its retry delay), not another's lease
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.r.Context()), bookTimeout)
		admission := kind == stepBefore && p.opts.Policy.Retry.Budget.Enabled()
		err := p.withShared(ctx, c.id, admission, false, func(b *book, m *admit.Job, now time.Time, out *rowOut, gate *admit.RetryBudget) error {
			deadline = b.Deadline
			if l := b.Lease; l != nil && l.Owner != c.sh.owner {
				if now.Before(l.Until) {
					if kind != stepBefore {
						return errLeaseLost
					}
					wait = l.Until.Sub(now)
					return nil
				}
				p.lostRow(b, m, now, out)
			} else if kind != stepBefore && (l == nil || l.Owner != c.sh.owner) {
				return errLeaseLost
			}
			if kind == stepBefore && !p.opts.Shadow { // a shadow forwards at once
				// What is left of the wait the retry rules set after the
				// job's last failure is waited out first (a client's own
				// retry that comes sooner), holding the job meanwhile.
				if left := m.Wait(&c.chain, now); left > 0 {
					b.Lease = &lease{Owner: c.sh.owner, Until: now.Add(left + flightGrace)}
					*c.m = *m
					wait, own = left, true
					return nil
				}
			}
			c.sh.gate = gate
			c.sh.lease = b.Lease
			fn(m, now, out)
			b.Lease = c.sh.lease
			*c.m = *m
			return nil
		})
		cancel()
		if errors.Is(err, errForgotten) {
			c.sh.forgotten = true
			return err
		}
		if err != nil || wait == 0 {
			if err != nil {
				p.opts.OnError(fmt.Errorf("the books of job %s: %w", c.id, err))
			}
			return err
		}
		if !own && !deadline.IsZero() && p.opts.Now().After(deadline.Add(turnGrace)) {
			return fmt.Errorf("its earlier request is still running past the job's deadline")
		}
		if !own {
			wait = min(wait, leasePoll)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.r.Context().Done():
			t.Stop()
			if own {
				c.stopped() // it held the job: the row that ends it
			}
			panic(http.ErrAbortHandler) // gone before its turn: nothing was decided
		}
	}
}

// withShared runs fn on the job's machine as its shared book holds it,
// then keeps the machine (and fn's changes to the book's lease) with
// the rows fn wrote, in one transaction. A sweep never makes a book: a
// key another proxy forgot meanwhile is left forgotten. A decision
// (admission) under a retry budget locks the budget's shared record too,
// in the same transaction: proxies that share books share the budget,
// and a retry's count and its row commit together; fn gets the budget
// as the record holds it.
func (p *Proxy) withShared(ctx context.Context, id string, admission, sweeping bool, fn func(b *book, m *admit.Job, now time.Time, out *rowOut, gate *admit.RetryBudget) error) error {
	cfg := p.opts.Policy.Retry.Budget
	forgotten := false
	run := func(old, sharedOld []byte, now time.Time, withBudget bool) (store.Record, []byte, []ledgerfile.Row, error) {
		forgotten = false
		if old == nil && sweeping {
			return store.Record{}, nil, nil, nil
		}
		b, m, err := p.openBook(id, old, now)
		if err != nil {
			return store.Record{}, nil, nil, err
		}
		if b.Forgotten {
			// Kept as it is, and no failure of the store's (its
			// metrics and /readyz count those): errForgotten below.
			forgotten = !sweeping
			return store.Record{Data: old, Due: store.Never}, sharedOld, nil, nil
		}
		var gate *admit.RetryBudget
		if withBudget {
			var state admit.BudgetState
			if sharedOld != nil {
				if err := json.Unmarshal(sharedOld, &state); err != nil {
					return store.Record{}, nil, nil, fmt.Errorf("the shared retry budget is unreadable: %w", err)
				}
			}
			gate = admit.RestoreBudget(cfg, state)
		}
		out := rowOut{}
		if err := fn(b, m, now, &out, gate); err != nil {
			return store.Record{}, nil, nil, err
		}
		var budget []byte
		if withBudget {
			if budget, err = json.Marshal(gate.State(now)); err != nil {
				return store.Record{}, nil, nil, err
			}
		}
		p.keepBook(b, m, out.rows)
		due := b.Deadline.Add(p.opts.Retention)
		if b.Lease != nil {
			due = b.Lease.Until // a lease expired is a lost attempt's row, soon
		}
		if sweeping && b.Lease == nil && !now.Before(b.Deadline.Add(p.opts.Retention)) {
			return store.Record{Data: forgottenBook, Due: store.Never}, budget, out.rows, nil
		}
		data, err := json.Marshal(b)
		return store.Record{Data: data, Due: due}, budget, out.rows, err
	}
	var err error
	if admission {
		err = p.opts.Books.BookShared(ctx, id, budgetKey, func(old, sharedOld []byte, now time.Time) (store.Record, []byte, []ledgerfile.Row, error) {
			return run(old, sharedOld, now, true)
		})
	} else {
		err = p.opts.Books.Book(ctx, id, func(old []byte, now time.Time) (store.Record, []ledgerfile.Row, error) {
			rec, _, rows, err := run(old, nil, now, false)
			return rec, rows, err
		})
	}
	if err == nil && forgotten {
		return errForgotten
	}
	return err
}

// budgetKey is the retry budget's record in shared books: a space, so
// never a job id (printable ASCII without spaces).
const budgetKey = "retry budget"

// openBook is a job's book and its machine, or a new one made at now
// (its deadline is made here, once, and every proxy inherits it).
func (p *Proxy) openBook(id string, old []byte, now time.Time) (*book, *admit.Job, error) {
	m := new(admit.Job)
	if old == nil {
		m.Start(now, p.opts.Policy.Budget.Deadline)
		return &book{JobState: m.State(nil)}, m, nil
	}
	var b book
	if err := json.Unmarshal(old, &b); err != nil {
		return nil, nil, fmt.Errorf("the books of job %s are unreadable: %w", id, err)
	}
	m.Load(b.JobState)
	return &b, m, nil
}

// keepBook writes the machine back into its book, with the sent
// attempts of the rows the step wrote (what the machine took).
func (p *Proxy) keepBook(b *book, m *admit.Job, rows []ledgerfile.Row) {
	sent := b.Sent
	for i := range rows {
		if !rows[i].Unsent {
			sent = append(sent, ledgerfile.AttemptOf(&rows[i]))
		}
	}
	b.JobState = m.State(sent)
}

func (p *Proxy) seatIndex(name string) int {
	for s := range p.seats {
		if p.seats[s].cfg.Name == name {
			return s
		}
	}
	return 0
}

// lostRow ends a lease whose holder is gone: the row of the attempt it
// had in flight (see flightGrace), taken into the job's books as any
// attempt, and the lease released.
func (p *Proxy) lostRow(b *book, m *admit.Job, now time.Time, out *rowOut) {
	l := b.Lease
	b.Lease = nil
	if l == nil || l.Attempt == 0 {
		return
	}
	hard := max(l.Until.Sub(l.Base.TS)-flightGrace, 0)
	obs := seat.Observation{Outcome: admit.Timeout, Elapsed: hard, Wait: hard,
		Billing: admit.BillingOf(admit.Timeout, hard, p.opts.Policy.Retry.SlowServerAfter)}
	var row ledgerfile.Row
	rehearse.SentRow(&row, &l.Base, m.Track(), &obs, 0, false,
		"lost: the proxy that sent it stopped before its row; its outcome is unknown")
	a := ledgerfile.AttemptOf(&row)
	ch := p.bookChain()
	m.Take(&ch, p.seatIndex(l.Seat), &a, nil)
	out.add(&row, "") // a named job's: no job_end (see call.end)
}

// bookChain is a chain for taking an attempt into a book outside any
// request (a lost attempt): the seats' names and the policy's numbers;
// no breaker or retry budget is asked.
func (p *Proxy) bookChain() admit.Chain {
	pol := p.opts.Policy
	c := admit.Chain{Budget: pol.Budget, Retry: pol.Retry, Hard: pol.Timeouts.Hard, Round: ledgerfile.Resolution}
	for s := range p.seats {
		c.Seats = append(c.Seats, admit.ChainSeat{Name: p.seats[s].cfg.Name})
	}
	return c
}

// sweepShared writes the rows of lost attempts and forgets the shared
// books whose time has come; any proxy on the store may do it, and each
// book is swept once.
func (p *Proxy) sweepShared() {
	ctx, cancel := context.WithTimeout(context.Background(), bookTimeout)
	defer cancel()
	keys, err := p.opts.Books.Due(ctx, 256)
	if err != nil {
		p.opts.OnError(fmt.Errorf("sweeping the shared books: %w", err))
		return
	}
	for _, k := range keys {
		err := p.withShared(ctx, k, false, true, func(b *book, m *admit.Job, now time.Time, out *rowOut, _ *admit.RetryBudget) error {
			if l := b.Lease; l != nil && !now.Before(l.Until) {
				p.lostRow(b, m, now, out)
			}
			return nil
		})
		if err != nil {
			p.opts.OnError(fmt.Errorf("sweeping the shared books: %w", err))
			return
		}
	}
}

// Sweep forgets old jobs at now, in process and in the shared books;
// the command calls it on a ticker.
func (p *Proxy) Sweep() {
	p.mu.Lock()
	p.expire(p.opts.Now()) // in-process jobs past their retention
	p.mu.Unlock()
	if p.opts.Books != nil {
		p.sweepShared()
	}
}

// Close waits for the requests in flight (each is bounded by its job's
// deadline, so this ends) and returns once every row is in the log.
// Every request's last row carries its job's end, so no job is left
// without one.
func (p *Proxy) Close() {
	p.wg.Wait()
	for i := range p.seats {
		if t, ok := p.seats[i].rt.(interface{ CloseIdleConnections() }); ok {
			t.CloseIdleConnections()
		}
	}
	p.q.close()
	p.events.close()
}
