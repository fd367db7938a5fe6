package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// This file is `claim` on a job's books: a shell retry loop reserves each
// attempt of a job and gets the time it may use. The job lives in the
// Books, a file or PostgreSQL alike, as the job machine keeps it
// (admit.JobState) with the attempts granted and not yet recorded; each
// claim reads it under the job's lock, asks the machine (admit.Job.Before)
// with those attempts held, and keeps the grant. There is no decision of
// claim's own.

// claimPrefix begins every key claim keeps a job under: a job id a proxy
// names has no space, so a claim's key never meets a proxy's.
const claimPrefix = "claim "

// ClaimKey is the books' key of claim's job id.
func ClaimKey(job string) string { return claimPrefix + job }

func isClaimKey(key string) bool { return strings.HasPrefix(key, claimPrefix) }

// forgetAfter is how long a job whose deadline has passed is kept (its
// record's Expires), so a late claim still refuses with "deadline" rather
// than starting afresh. It is measured like the deadline, on the books'
// clock, so a wall clock set forward forgets nothing.
const forgetAfter = 24 * time.Hour

// minAttemptTime is the least an attempt can take: a claim at the very
// end of the deadline is refused rather than granted a zero timeout
// (which curl reads as "no timeout", and claim prints whole milliseconds).
const minAttemptTime = time.Millisecond

// Claims is where claim keeps its jobs: the books, and the log whose rows
// settle the attempts it granted (PostgreSQL: one database holds both).
// Log is nil for a file's claims: no row settles a grant there, so each
// counts as used with its reservation spent, and the gate's numbers are
// attempts and the deadline.
type Claims struct {
	Books Books
	Log   Log
}

// Request is one claim.
type Request struct {
	Job    string
	Budget admit.Budget  // used by the job's first claim only
	Hard   time.Duration // caps the attempt's timeout when > 0
	// Next is the attempt's estimate; its Tokens and USD count as spent
	// while the attempt is held (admit.DecideHeld), and as spent for good
	// if its timeout passes with no row to settle it.
	Next admit.Next
	// Now is the claim's time; zero means the books' clock (the database
	// server's, so that many machines share one; a file's own).
	Now time.Time
}

// Grant is a claim's answer.
type Grant struct {
	Decision admit.Decision
	Attempt  int           // the attempt reserved (1-based), when admitted
	Timeout  time.Duration // what the attempt may use, when admitted
	// Spent is what the decision was made on: the job's spend, each held
	// attempt counted as used with the estimate spent.
	Spent admit.Spent
	Held  int // attempts granted before, neither recorded nor timed out
	// Start and Deadline are the job's, made by its first claim.
	Start, Deadline time.Time
}

// ClaimBook is a claimed job as the books keep it: the budget its first
// claim fixed, the job machine's state (admit.JobState: its deadline, the
// attempts numbered, the attempts its books took: recorded by a row), and
// the attempts granted and not yet recorded.
type ClaimBook struct {
	Budget admit.Budget   `json:"budget"`
	Job    admit.JobState `json:"job"`
	Held   []HeldAttempt  `json:"held,omitempty"`
}

// HeldAttempt is an attempt granted and not recorded: held until Until
// (its timeout), then taken as spent, its outcome unknown.
type HeldAttempt struct {
	Attempt int       `json:"attempt"`
	ID      string    `json:"id"` // so that two copies of a job merge exactly
	At      time.Time `json:"at,omitzero"`
	Until   time.Time `json:"until,omitzero"`
	Tokens  int64     `json:"tokens,omitempty"`
	USD     float64   `json:"usd,omitempty"`
}

// ReadClaim reads a claim's record (what Claims keeps under ClaimKey).
func ReadClaim(data []byte) (ClaimBook, error) {
	var c ClaimBook
	err := json.Unmarshal(data, &c)
	return c, err
}

// Claim reserves the job's next attempt, or refuses it. The first claim
// of a job fixes its budget and starts its deadline; later claims inherit
// both.
func (c Claims) Claim(ctx context.Context, req Request) (Grant, error) {
	if err := req.Budget.Validate(); err != nil {
		return Grant{}, err
	}
	// The rows that settle grants are read before the job's lock: a row
	// that lands meanwhile leaves its attempt held, which counts it as
	// used (the next claim settles it).
	var rows []ledgerfile.Row
	if c.Log != nil {
		var err error
		if rows, err = c.Log.ReadJob(ctx, req.Job); err != nil {
			return Grant{}, err
		}
	}
	var g Grant
	err := c.Books.Book(ctx, ClaimKey(req.Job), func(old []byte, now time.Time) (Record, []ledgerfile.Row, error) {
		if !req.Now.IsZero() {
			now = req.Now
		}
		var rec Record
		var err error
		g, rec, err = claim(req, old, rows, now)
		return rec, nil, err
	})
	return g, err
}

// Done forgets a finished job.
func (c Claims) Done(ctx context.Context, job string) error {
	return c.Books.Book(ctx, ClaimKey(job), func([]byte, time.Time) (Record, []ledgerfile.Row, error) {
		return Record{}, nil, nil
	})
}

// claim is one claim on the job's record old (nil: a new job) at now.
func claim(req Request, old []byte, rows []ledgerfile.Row, now time.Time) (Grant, Record, error) {
	var b ClaimBook
	if old == nil {
		b = ClaimBook{Budget: req.Budget, Job: admit.JobState{Start: now, Deadline: now.Add(req.Budget.Deadline)}}
	} else if err := json.Unmarshal(old, &b); err != nil {
		return Grant{}, Record{}, fmt.Errorf("the claim of job %s is unreadable: %w", req.Job, err)
	}
	settled := b.settle(rows)
	job, held := b.load(now)
	n := estimate(req.Next)
	chain := admit.Chain{Budget: b.Budget, Hard: admit.MaxDuration, Seats: []admit.ChainSeat{{}}}
	if req.Hard > 0 {
		chain.Hard = req.Hard
	}
	p := job.Before(&chain, admit.Ask{Now: now, Waited: job.Waited(now), Held: held, Estimate: &n})
	g := Grant{Decision: p.Decision, Spent: p.Spent, Held: held, Start: b.Job.Start, Deadline: b.Job.Deadline}
	switch {
	case p.Decision.Admit:
		g.Attempt = b.grant(HeldAttempt{ID: grantID(), At: now, Until: now.Add(p.Hard), Tokens: n.Tokens, USD: n.USD})
		g.Timeout = p.Hard
	case old == nil:
		return g, Record{}, nil // a refused first claim keeps nothing
	case !settled:
		return g, Record{Data: old, Due: Never, Expires: b.expires()}, nil
	}
	data, err := json.Marshal(b)
	return g, Record{Data: data, Due: Never, Expires: b.expires()}, err
}

// estimate is the estimate the gate sees for a claim: at least the least
// an attempt can take.
func estimate(n admit.Next) admit.Next {
	if n.Elapsed() < minAttemptTime {
		n.Gen = minAttemptTime - n.Wait
	}
	n.Tokens = admit.ClampTokens(n.Tokens)
	n.USD = admit.ClampUSD(n.USD)
	return n
}

// settle takes each held attempt that a row records into the job's books,
// as the row records it, and reports whether any was.
func (b *ClaimBook) settle(rows []ledgerfile.Row) bool {
	if len(rows) == 0 || len(b.Held) == 0 {
		return false
	}
	byAttempt := make(map[int]*ledgerfile.Row, len(rows))
	for i := range rows {
		byAttempt[rows[i].Attempt] = &rows[i]
	}
	held := make([]HeldAttempt, 0, len(b.Held))
	for _, h := range b.Held {
		r := byAttempt[h.Attempt]
		switch {
		case r == nil:
			held = append(held, h)
		case r.WasSent():
			b.Job.Sent = append(b.Job.Sent, ledgerfile.AttemptOf(r))
		default: // recorded as not sent: it used the attempt and nothing else
			b.Job.Sent = append(b.Job.Sent, admit.Attempt{Seat: r.Seat, Outcome: admit.Cancelled, Billing: admit.Free})
		}
	}
	settled := len(held) < len(b.Held)
	b.Held = held
	return settled
}

// load is the job at now, and how many of its attempts are held. An
// attempt held past its timeout with no row is taken into the books as
// spent (its reservation), its outcome unknown; its time is the clock's,
// which the job's deadline is measured on.
func (b *ClaimBook) load(now time.Time) (*admit.Job, int) {
	st := b.Job
	st.Sent = slices.Clip(st.Sent)
	held := 0
	for _, h := range b.Held {
		if now.Before(h.Until) {
			held++
			continue
		}
		st.Sent = append(st.Sent, admit.Attempt{Outcome: admit.Timeout, Billing: admit.Ambiguous, Tokens: h.Tokens, USD: h.USD})
	}
	var j admit.Job
	j.Load(st)
	return &j, held
}

// grant keeps h as the job's next attempt and returns its number.
func (b *ClaimBook) grant(h HeldAttempt) int {
	b.Job.Attempts = min(b.Job.Attempts+1, admit.MaxAttempts)
	h.Attempt = b.Job.Attempts
	b.Held = append(b.Held, h)
	return h.Attempt
}

// expires is when the books forget the job: a day past its deadline.
func (b *ClaimBook) expires() time.Time { return b.Job.Deadline.Add(forgetAfter) }

// claimExpires is a claim record's expiry, or def when it is unreadable.
func claimExpires(data []byte, def time.Time) time.Time {
	b, err := ReadClaim(data)
	if err != nil {
		return def
	}
	return b.expires()
}

// mergeClaim merges two copies of a claimed job (a books file removed
// while a claimer held it, carried into the one at the path): every
// attempt either granted, counted once, the stricter deadline and cap,
// and the timing of the copy that started first. Merging never gives a
// job time or attempts back.
func mergeClaim(kept, carried []byte) ([]byte, error) {
	a, err := ReadClaim(kept)
	if err != nil {
		return nil, err
	}
	o, err := ReadClaim(carried)
	if err != nil {
		return nil, err
	}
	m := a
	if o.Job.Start.Before(a.Job.Start) {
		m, o = o, a
	}
	held := slices.Clone(m.Held)
	for _, h := range o.Held {
		if !slices.ContainsFunc(held, func(x HeldAttempt) bool { return x.ID == h.ID }) {
			held = append(held, h)
		}
	}
	if len(o.Job.Sent) > len(m.Job.Sent) {
		m.Job.Sent = o.Job.Sent
	}
	m.Held, m.Job.Attempts = nil, len(m.Job.Sent)
	for _, h := range held {
		m.grant(h)
	}
	m.Budget.Deadline = min(m.Budget.Deadline, o.Budget.Deadline)
	m.Budget.MaxAttempts = min(m.Budget.MaxAttempts, o.Budget.MaxAttempts)
	if o.Job.Deadline.Before(m.Job.Deadline) {
		m.Job.Deadline = o.Job.Deadline
	}
	return json.Marshal(m)
}

func grantID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
