package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/rehearse"
)

// runLog is where a rehearsal or a proxy writes: the file (the embedded
// default), or a PostgreSQL log that many machines share.
type runLog interface {
	// reserve numbers the run one past the highest in the log and writes
	// its `# run` line, under the log's lock.
	reserve(describe string) (int, error)
	comment(text string) error
	append(r *ledgerfile.Row) error
	// event appends a `# event` line after the rows appended before it.
	event(e *ledgerfile.Event) error
	// flush writes every row appended so far; it reports any row that
	// could not be written.
	flush() error
	Close() error

	// The proxy's: appendRows writes rows at once, in order; appendEvents
	// the `# event request` lines of requests that are no attempt
	// (pass-throughs, refusals before a job).
	appendRows(rs []ledgerfile.Row) error
	appendEvents(es []ledgerfile.Event) error
	// books keeps named jobs' books: nil for a file (one proxy keeps them
	// in memory); a PostgreSQL log's database, so that every proxy on it
	// shares one budget per job.
	books() store.Books
	// ready is /readyz's check that the log takes rows.
	ready(ctx context.Context) error
	// onReopen sets what is told when a file log's path names another
	// file and is opened again (ledgerfile.Writer.OnReopen); a database
	// has no path.
	onReopen(fn func(why string) string)
}

// Rows a rehearsal holds before writing them (see ledgerfile.Writer.Batch):
// thousands of rows a second, one write(2) per row, under the loop's
// lock, were a tenth of a fast run's CPU. The log stays live within
// runLogEvery.
const (
	runLogBatch = 64 << 10
	runLogEvery = 100 * time.Millisecond
)

func openRunLog(ctx context.Context, errOut io.Writer, name string) (runLog, error) {
	if !isDBLog(name) {
		w := ledgerfile.NewWriter(name, false)
		w.Batch(runLogBatch, runLogEvery)
		return fileRunLog{w}, nil
	}
	l, err := openLog(ctx, errOut, name, false)
	if err != nil {
		return nil, err
	}
	return &dbRunLog{ctx: ctx, l: l}, nil
}

type fileRunLog struct{ *ledgerfile.Writer }

func (f fileRunLog) reserve(describe string) (int, error) {
	return rehearse.ReserveRun(f.Writer, describe)
}
func (f fileRunLog) comment(text string) error       { return f.Comment(text) }
func (f fileRunLog) append(r *ledgerfile.Row) error  { return f.AppendOne(r) }
func (f fileRunLog) flush() error                    { return f.Flush() }
func (f fileRunLog) event(e *ledgerfile.Event) error { return f.Event(e) }
func (f fileRunLog) books() store.Books              { return nil }

func (f fileRunLog) onReopen(fn func(why string) string) { f.OnReopen(fn) }

// appendRows writes the proxy's rows at once, whatever the writer's
// batching: the proxy gathers its own batches, counts a batch's rows as
// the log's when this returns nil, and holds them for the next write
// when it does not.
func (f fileRunLog) appendRows(rs []ledgerfile.Row) error {
	return f.Locked(func() ([]ledgerfile.Row, error) { return rs, nil })
}

func (f fileRunLog) appendEvents(es []ledgerfile.Event) error {
	for i := range es {
		if err := f.Event(&es[i]); err != nil {
			return err
		}
	}
	return nil
}

// ready: the log's path is a regular file, or nothing yet in a
// directory (the next row makes it there). It looks at the path
// (lstat) and opens nothing: whatever the path has become (a FIFO, a
// device), the check never waits on it. Whether the rows write is the
// writes' own verdict (metrics.Metrics.Ready).
func (f fileRunLog) ready(context.Context) error {
	st, err := os.Lstat(f.Path())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		dir := filepath.Dir(f.Path())
		if st, err := os.Stat(dir); err != nil {
			return fmt.Errorf("log %s: its directory: %w", f.Path(), unwrapPathErr(err))
		} else if !st.IsDir() {
			return fmt.Errorf("log %s: %s is not a directory", f.Path(), dir)
		}
		return nil
	case err != nil:
		return fmt.Errorf("log %s: %w", f.Path(), unwrapPathErr(err))
	case !st.Mode().IsRegular():
		return fmt.Errorf("log %s: %s, not a regular file", f.Path(), ledgerfile.FileKind(st.Mode()))
	}
	return nil
}

type dbRunLog struct {
	ctx context.Context
	l   store.Log
}

// reserve numbers the run as the file does (ledgerfile.HighestRun: `# run
// rN` lines and rN-k job ids), over the log exported line by line as a
// file would hold it, under the lock every reserve takes.
func (d *dbRunLog) reserve(describe string) (int, error) {
	run := 0
	err := d.l.CommentLocked(d.ctx, func([]string) (string, error) {
		pr, pw := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			pw.CloseWithError(store.Export(d.ctx, d.l, pw))
		}()
		high, err := ledgerfile.HighestRun(pr)
		pr.Close() // an early stop ends the export too
		<-done
		if err != nil {
			return "", fmt.Errorf("failed to read log %s: %w", d.l.Name(), err)
		}
		run = high + 1
		return ledgerfile.RunText(run, describe), nil
	})
	return run, err
}

func (d *dbRunLog) comment(text string) error {
	return d.l.CommentLocked(d.ctx, func([]string) (string, error) { return text, nil })
}

func (d *dbRunLog) append(r *ledgerfile.Row) error { return d.l.Append(d.ctx, *r) }

// event is a comment line in the database's log, as in the file.
func (d *dbRunLog) event(e *ledgerfile.Event) error {
	line, err := ledgerfile.FormatEvent(e)
	if err != nil {
		return err
	}
	return d.comment(strings.TrimPrefix(line, "# "))
}
func (d *dbRunLog) flush() error { return nil } // each row is written at once
func (d *dbRunLog) Close() error { return d.l.Close() }

// db is the database under the reporting wrapper openLog puts on it.
func (d *dbRunLog) db() store.Log {
	if rep, ok := d.l.(*reportingLog); ok {
		return rep.Log
	}
	return d.l
}

func (d *dbRunLog) onReopen(func(string) string) {}

// The proxy writes rows and event lines while it drains, after ctx is
// done. A failed write is not reported row by row here: the proxy holds
// its rows for the next write, and tells of those it loses.
func (d *dbRunLog) appendRows(rs []ledgerfile.Row) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), dbWriteTimeout)
	defer cancel()
	return d.db().Append(ctx, rs...)
}

// dbWriteTimeout bounds one write of the proxy's rows to a database: a
// server that does not answer holds the rows, not the proxy's writer.
const dbWriteTimeout = 20 * time.Second

// appendEvents writes a batch of event lines in one transaction, one
// round trip (pgstore's AppendEntries).
func (d *dbRunLog) appendEvents(es []ledgerfile.Event) error {
	db, ok := d.db().(interface {
		AppendEntries(ctx context.Context, entries []store.Entry) error
	})
	if !ok {
		return fmt.Errorf("log %s: takes no event lines", d.l.Name())
	}
	batch := make([]store.Entry, 0, len(es))
	for i := range es {
		line, err := ledgerfile.FormatEvent(&es[i])
		if err != nil {
			return err
		}
		batch = append(batch, store.Entry{Comment: line})
	}
	return db.AppendEntries(context.WithoutCancel(d.ctx), batch)
}

func (d *dbRunLog) books() store.Books {
	b, _ := d.db().(store.Books)
	return b
}

// ready: the database answers and is writable.
func (d *dbRunLog) ready(ctx context.Context) error {
	if w, ok := d.db().(interface{ Writable(context.Context) error }); ok {
		return w.Writable(ctx)
	}
	return nil
}
