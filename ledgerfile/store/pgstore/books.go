package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"retrygate/ledgerfile"
	"retrygate/ledgerfile/store"
)

// lockBook makes the key's row if it is new, or locks it as it is: one
// statement, so two holders reaching a new key at once both see one row,
// the second after the first commits. It returns the record (NULL when
// new) and the store's clock.
const lockBook = `INSERT INTO retrygate_books AS b (key, due, book) VALUES ($1, 'infinity', NULL)
	ON CONFLICT (key) DO UPDATE SET key = b.key
	RETURNING b.book, COALESCE($2::timestamptz, statement_timestamp())`

// Book runs fn on key's record under the row's lock, then stores fn's
// record and appends its rows in the same transaction (see store.Books).
// Each row settles its claim reservation, as Append does.
func (s *Store) Book(ctx context.Context, key string, fn func(old []byte, now time.Time) (store.Record, []ledgerfile.Row, error)) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		var old []byte
		var now time.Time
		if err := tx.QueryRow(ctx, lockBook, key, s.clock()).Scan(&old, &now); err != nil {
			return err
		}
		rec, rows, err := fn(old, now)
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		if rec.Data == nil {
			b.Queue(`DELETE FROM retrygate_books WHERE key = $1`, key)
		} else {
			b.Queue(`UPDATE retrygate_books SET book = $2, due = $3 WHERE key = $1`, key, rec.Data, rec.Due.UTC())
		}
		for i := range rows {
			args, err := rowArgs(&rows[i])
			if err != nil {
				return err
			}
			b.Queue(insertRow, args...)
		}
		for i := range rows {
			if r := &rows[i]; r.Job != "" && r.Attempt > 0 {
				queueSettle(b, r)
			}
		}
		err = tx.SendBatch(ctx, b).Close()
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "retrygate_rows_job_attempt_key" {
			return fmt.Errorf("%w: %s", store.ErrDuplicate, pe.Detail)
		}
		return err
	})
}

// Due lists up to n keys whose due time has passed by the store's clock.
func (s *Store) Due(ctx context.Context, n int) ([]string, error) {
	var keys []string
	err := s.tx(ctx, func(tx pgx.Tx) error {
		keys = keys[:0]
		rs, err := tx.Query(ctx, `SELECT key FROM retrygate_books
			WHERE due <= COALESCE($1::timestamptz, statement_timestamp()) ORDER BY due LIMIT $2`, s.clock(), n)
		if err != nil {
			return err
		}
		keys, err = pgx.CollectRows(rs, pgx.RowTo[string])
		return err
	})
	return keys, err
}

// clock is the claim clock when one is set (tests), else nil: the
// server's.
func (s *Store) clock() *time.Time {
	if s.opts.Now == nil {
		return nil
	}
	t := s.opts.Now().UTC()
	return &t
}

var _ store.Books = (*Store)(nil)
