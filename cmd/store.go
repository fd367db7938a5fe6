package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore"
	"github.com/retrygate/retrygate/rehearse/model"
)

// This file is the one place a log or claim store is opened from what a
// user gave (--log, the log: key, RETRYGATE_LOG, claim --state): a file
// path, or a postgres:// URL for many machines sharing one log and one
// budget. Every command goes through it.

// isDBLog reports whether name is a database URL rather than a path.
func isDBLog(name string) bool { return pgstore.IsURL(name) }

// logDisplay is how output and errors name a log: a path as given, a URL
// without its password.
func logDisplay(name string) string {
	if isDBLog(name) {
		return pgstore.Redact(name)
	}
	return name
}

const dbHint = "check that the server is up and the URL right; a new database needs: retrygate db init URL"

// openLog opens the log a command appends to or reads. A file is not
// created before its first row; a database must have been set up with
// `retrygate db init`. Rows that were sent but could not be written are
// printed on errOut, so that no attempt is lost silently.
func openLog(ctx context.Context, errOut io.Writer, name string, fsync bool) (store.Log, error) {
	if !isDBLog(name) {
		return &reportingLog{Log: store.OpenFile(name, fsync), errOut: errOut}, nil
	}
	s, err := pgstore.Open(ctx, name, pgstore.Options{})
	if err != nil {
		return nil, withHint(badInputErr(fmt.Errorf("failed to open log %s: %w", logDisplay(name), err)), dbHint)
	}
	return &reportingLog{Log: s, errOut: errOut}, nil
}

// openClaims opens the books claim keeps its jobs in: a file (whose own
// clock reads clock), or a database, whose rows settle what was claimed.
// The closer is nil for a file.
func openClaims(ctx context.Context, name string, clock store.Clock) (store.Claims, io.Closer, error) {
	if !isDBLog(name) {
		return store.Claims{Books: &store.FileBooks{Path: name, Clock: clock}}, nil, nil
	}
	s, err := pgstore.Open(ctx, name, pgstore.Options{})
	if err != nil {
		return store.Claims{}, nil, withHint(badInputErr(fmt.Errorf("failed to open claim state %s: %w", logDisplay(name), err)), dbHint)
	}
	return store.Claims{Books: s, Log: s}, s, nil
}

// openLogReader is a log's bytes in the file format, for the commands
// that read a log as a stream (report, check, tune, simulate): a file as
// it is, or a database's rows exported as they stream from the server,
// through one reader contract and bounded memory.
func openLogReader(ctx context.Context, name string) (io.ReadCloser, error) {
	if !isDBLog(name) {
		return openLogFile(name)
	}
	l, err := openLog(ctx, io.Discard, name, false)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		err := store.Export(ctx, l, pw)
		l.Close()
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// openLogFile opens a log file to read; a directory is refused.
func openLogFile(name string) (*os.File, error) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, badInput("failed to open log %q: %v", name, unwrapPathErr(err))
	}
	if st, err := fh.Stat(); err == nil && st.IsDir() {
		fh.Close()
		return nil, badInput("failed to read log %q: is a directory", name)
	}
	return fh, nil
}

// readJob is the rows of one job the gate keeps books from (ledgerfile.BookRows)
// in a log named by a path or a URL.
func readJob(ctx context.Context, name, job string) ([]ledgerfile.Row, error) {
	if !isDBLog(name) {
		return ledgerfile.JobTail(name, job, ledgerfile.BookRows())
	}
	l, err := openLog(ctx, io.Discard, name, false)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	return l.ReadJob(ctx, job)
}

// reportingLog prints, on a failed write, every sent row that it could
// not write: the attempt happened (and may have been billed) even though
// the log does not have it.
type reportingLog struct {
	store.Log
	errOut io.Writer
}

func (l *reportingLog) Append(ctx context.Context, rows ...ledgerfile.Row) error {
	err := l.Log.Append(ctx, rows...)
	if err != nil {
		l.unwritten(rows, err)
	}
	return err
}

func (l *reportingLog) AppendJob(ctx context.Context, job string, fn func([]ledgerfile.Row) ([]ledgerfile.Row, error)) error {
	var rows []ledgerfile.Row
	var fnErr error
	err := l.Log.AppendJob(ctx, job, func(earlier []ledgerfile.Row) ([]ledgerfile.Row, error) {
		rows, fnErr = fn(earlier)
		return rows, fnErr
	})
	if err != nil && fnErr == nil {
		l.unwritten(rows, err)
	}
	return err
}

func (l *reportingLog) unwritten(rows []ledgerfile.Row, err error) {
	if l.errOut == nil {
		return
	}
	for i := range rows {
		if rows[i].WasSent() {
			fmt.Fprintf(l.errOut, "retrygate: warning: a sent attempt's row was not written to %s (%v); the row:\n%s\n",
				logDisplay(l.Log.Name()), err, ledgerfile.FormatRow(&rows[i]))
		}
	}
}

// parseModel is model.Parse, with `log:postgres://…[:SEAT]` read from the
// database: the bootstrap model over the same rows a file would hold.
func parseModel(ctx context.Context, spec string) (model.Model, error) {
	u, ok := strings.CutPrefix(strings.TrimSpace(spec), "log:")
	if !ok || !isDBLog(u) {
		return model.Parse(spec)
	}
	seatName := ""
	// A seat follows the URL after a colon past the database's path
	// (postgres://h:5432/db:scratch); the port's colon comes before it.
	if rest := u[strings.Index(u, "://")+3:]; strings.Contains(rest, "/") {
		path := rest[strings.Index(rest, "/"):]
		if i := strings.LastIndexByte(path, ':'); i >= 0 {
			seatName = path[i+1:]
			u = u[:len(u)-len(path)+i]
		}
	}
	rows, err := readJob(ctx, u, "")
	if err != nil {
		return nil, err
	}
	return model.FromRows(rows, logDisplay(u), seatName)
}
