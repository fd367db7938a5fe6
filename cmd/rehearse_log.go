package cmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"retrygate/ledgerfile"
	"retrygate/ledgerfile/store"
	"retrygate/rehearse"
)

// runLog is where a rehearsal writes: the file (the embedded default), or
// a PostgreSQL log that many machines share.
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

type dbRunLog struct {
	ctx context.Context
	l   store.Log
}

// reserve numbers the run as the file does (rehearse.HighestRun: `# run
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
		high, err := rehearse.HighestRun(pr)
		pr.Close() // an early stop ends the export too
		<-done
		if err != nil {
			return "", fmt.Errorf("failed to read log %s: %w", d.l.Name(), err)
		}
		run = high + 1
		return strings.TrimSpace(fmt.Sprintf("run r%d %s", run, describe)), nil
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
