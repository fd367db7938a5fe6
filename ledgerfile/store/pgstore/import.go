package pgstore

import (
	"context"
	"fmt"
	"iter"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
)

var copyColumns = func() []string {
	cols := strings.Split(rowColumns, ",")
	for i := range cols {
		cols[i] = strings.TrimSpace(cols[i])
	}
	return cols
}()

// Import loads entries (a file's rows and comments, in order) with COPY,
// in one transaction: all of them or none. A (job, attempt) already in
// the table is refused as ErrDuplicate. It is not retried: entries are
// read once. It returns how many rows it loaded.
func (s *Store) Import(ctx context.Context, entries iter.Seq2[store.Entry, error]) (rows int64, err error) {
	next, stop := iter.Pull2(entries)
	defer stop()
	var fileErr error // the file's error, not the server's
	src := pgx.CopyFromFunc(func() ([]any, error) {
		e, err, ok := next()
		if !ok {
			return nil, nil
		}
		if err == nil && e.Row == nil {
			return commentArgs(e.Comment), nil
		}
		if err == nil {
			err = storable(e.Row)
		}
		var vals []any
		if err == nil {
			vals, err = rowArgs(e.Row)
		}
		if err != nil {
			fileErr = err
			return nil, err
		}
		rows++
		return vals, nil
	})
	err = s.once(ctx, func(tx pgx.Tx) error {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"retrygate_rows"}, copyColumns, src)
		if fileErr != nil {
			return fileErr
		}
		return s.duplicate(err)
	})
	if fileErr != nil {
		return 0, fileErr
	}
	if err != nil {
		return 0, s.wrap(err)
	}
	return rows, nil
}

// storable refuses what PostgreSQL's text cannot hold: a NUL character.
func storable(r *ledgerfile.Row) error {
	for _, f := range []struct{ key, v string }{{"job", r.Job}, {"seat", r.Seat}, {"model", r.Model},
		{"error_code", r.ErrorCode}, {"prompt_sha", r.PromptSHA}, {"note", r.Note}} {
		if strings.IndexByte(f.v, 0) >= 0 {
			return &ledgerfile.LineError{Line: r.Line, Err: fmt.Errorf("%s: a NUL character, which PostgreSQL cannot store", f.key)}
		}
	}
	for _, kv := range r.Extra {
		if strings.IndexByte(kv.Key+kv.Value, 0) >= 0 {
			return &ledgerfile.LineError{Line: r.Line, Err: fmt.Errorf("%s: a NUL character, which PostgreSQL cannot store", kv.Key)}
		}
	}
	return nil
}
