// Package store is where rows and claims live: a file under a lock (the
// embedded default) or PostgreSQL (many machines sharing one budget), behind
// one small interface, so every command reads and writes both alike.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// Entry is one line of a log in order: a row, or a comment (a `# run` or
// `# policy` line) when Row is nil.
type Entry struct {
	Row *ledgerfile.Row
	// Comment is the comment line as written, "# " included, without the
	// blanks around it and its newline (ledgerfile.CommentLine's form).
	Comment string
}

// Log holds rows. Writers append only; readers see the rows in the order
// they were appended.
type Log interface {
	// Name is how errors and output name the log: a path, or a URL with
	// no password.
	Name() string
	// Append writes rows, each one line, in order.
	Append(ctx context.Context, rows ...ledgerfile.Row) error
	// AppendJob runs fn with the job's rows so far while no other writer
	// can add a row to the log, then appends what fn returns: `record`
	// numbers attempts this way, without gaps or duplicates.
	AppendJob(ctx context.Context, job string, fn func(earlier []ledgerfile.Row) ([]ledgerfile.Row, error)) error
	// CommentLocked is AppendJob for one comment line: fn sees the log's
	// comments so far (rehearse numbers its runs from them).
	CommentLocked(ctx context.Context, fn func(comments []string) (string, error)) error
	// ReadJob returns the rows of one job, or every row when job is "".
	ReadJob(ctx context.Context, job string) ([]ledgerfile.Row, error)
	// Scan hands every entry to fn in log order, streaming: memory does not
	// grow with the log. The entry, its Row and the Row's strings are valid
	// only until fn returns: copy what you keep.
	Scan(ctx context.Context, fn func(Entry) error) error
	Close() error
}

// Claims holds each job's deadline, attempts, tokens and spend, so that
// claimers on one machine or many never take more than the budget holds.
type Claims interface {
	Name() string
	// Claim reserves the job's next attempt, or refuses it. The first
	// claim of a job fixes its budget and starts its deadline; later
	// claims inherit both.
	Claim(ctx context.Context, req Request) (Grant, error)
	// Done forgets a finished job.
	Done(ctx context.Context, job string) error
	Close() error
}

// Request is one claim.
type Request struct {
	Job    string
	Budget admit.Budget  // used by the job's first claim only
	Hard   time.Duration // caps the attempt's timeout when > 0
	// Next is the attempt's estimate; its Tokens and USD are reserved
	// (USD = price × (prompt + max_tokens)) until the row that records the
	// attempt settles them.
	Next admit.Next
	// Now is the claim's time; zero means the store's clock (the database
	// server's, so that many machines share one).
	Now time.Time
}

// Grant is a claim's answer.
type Grant struct {
	Decision admit.Decision
	Attempt  int           // the attempt reserved (1-based), when admitted
	Timeout  time.Duration // what the attempt may use, when admitted
	Job      Job
}

// Job is one job's claim state after the claim.
type Job struct {
	Started        time.Time
	Deadline       time.Duration
	MaxAttempts    int
	Attempts       int     // attempts claimed
	Tokens         int64   // settled and expired reservations
	USD            float64 // settled and expired reservations
	ReservedTokens int64   // held reservations
	ReservedUSD    float64
}

// Ends is when the job's deadline runs out.
func (j Job) Ends() time.Time { return j.Started.Add(j.Deadline) }

// ErrDuplicate is a second row for one (job, attempt).
var ErrDuplicate = errors.New("duplicate attempt")

// minAttemptTime is the least an attempt can take: a claim at the very
// end of the deadline is refused rather than granted a zero timeout
// (which curl reads as "no timeout", and claim prints whole milliseconds).
const minAttemptTime = time.Millisecond

// next is the estimate the gate sees for a claim.
func next(n admit.Next) admit.Next {
	if n.Elapsed() < minAttemptTime {
		n.Gen = minAttemptTime - n.Wait
	}
	n.Tokens = admit.ClampTokens(n.Tokens)
	n.USD = admit.ClampUSD(n.USD)
	return n
}

// Decide is the one decision on a claim, in every store: the gate
// (admit.Decide) over the job's spend, used of its deadline gone and
// every reservation still held counted as spent, and the timeout the
// attempt may use when it is admitted: what is left of the deadline,
// capped by hard when hard > 0.
func Decide(j Job, b admit.Budget, hard, used time.Duration, n admit.Next) (admit.Decision, time.Duration) {
	spent := admit.Spent{
		Time:     admit.ClampDuration(used),
		Tokens:   admit.AddTokens(j.Tokens, j.ReservedTokens),
		Attempts: j.Attempts,
		USD:      admit.AddUSD(j.USD, j.ReservedUSD),
	}
	d := admit.Decide(b, spent, next(n))
	if !d.Admit {
		return d, 0
	}
	t := d.Remaining.Time
	if hard > 0 && hard < t {
		t = hard
	}
	return d, t
}
