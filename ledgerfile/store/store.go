// Package store is where rows and a job's books live: a file under a lock
// (the embedded default) or PostgreSQL (many machines sharing one budget),
// behind one small interface each (Log, Books), so every command reads
// and writes both alike.
package store

import (
	"context"
	"errors"

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

// ErrDuplicate is a second row for one (job, attempt).
var ErrDuplicate = errors.New("duplicate attempt")
