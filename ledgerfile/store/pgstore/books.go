package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
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
// Record.Expires is not kept: a record stays until its owner forgets it.
//
// It is on the path of every named request a proxy forwards, twice, so
// it takes two round trips, not four: BEGIN goes with the statement that
// locks the row, and COMMIT with the writes.
func (s *Store) Book(ctx context.Context, key string, fn func(old []byte, now time.Time) (store.Record, []ledgerfile.Row, error)) error {
	return s.retry(ctx, func(ctx context.Context) error {
		return s.bookOnce(ctx, key, "", func(old, _ []byte, now time.Time) (store.Record, []byte, []ledgerfile.Row, error) {
			rec, rows, err := fn(old, now)
			return rec, nil, rows, err
		})
	})
}

// BookShared is Book with the shared record locked too, after key's, in
// the same transaction (see store.Books). It costs one more statement in
// each round trip; every request that uses it waits on the shared row.
func (s *Store) BookShared(ctx context.Context, key, shared string, fn func(old, sharedOld []byte, now time.Time) (store.Record, []byte, []ledgerfile.Row, error)) error {
	return s.retry(ctx, func(ctx context.Context) error { return s.bookOnce(ctx, key, shared, fn) })
}

func (s *Store) bookOnce(ctx context.Context, key, shared string, fn func(old, sharedOld []byte, now time.Time) (store.Record, []byte, []ledgerfile.Row, error)) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection left inside the transaction (an error before COMMIT)
	// is closed by the pool on release, which rolls the transaction back.
	defer c.Release()
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(lockBook, key, s.clock())
	if shared != "" {
		b.Queue(lockBook, shared, s.clock())
	}
	br := c.SendBatch(ctx, b)
	var old, sharedOld []byte
	var now time.Time
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&old, &now)
	}
	if err == nil && shared != "" {
		var also time.Time
		err = br.QueryRow().Scan(&sharedOld, &also)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	rec, sharedRec, rows, err := fn(old, sharedOld, now)
	if err != nil {
		rollback(ctx, c)
		return err
	}
	b = &pgx.Batch{}
	if rec.Data == nil {
		b.Queue(`DELETE FROM retrygate_books WHERE key = $1`, key)
	} else {
		b.Queue(`UPDATE retrygate_books SET book = $2, due = $3 WHERE key = $1`, key, rec.Data, rec.Due.UTC())
	}
	if shared != "" {
		b.Queue(`UPDATE retrygate_books SET book = $2, due = $3 WHERE key = $1`, shared, sharedRec, store.Never)
	}
	if err := queueRows(b, rows); err != nil {
		rollback(ctx, c)
		return err
	}
	b.Queue(`COMMIT`)
	err = c.SendBatch(ctx, b).Close()
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		// The server answered: a statement failed, COMMIT never ran.
		rollback(ctx, c)
		return s.duplicate(err)
	}
	return errCommit{err} // the connection failed with COMMIT sent, or not
}

func rollback(ctx context.Context, c *pgxpool.Conn) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_, _ = c.Exec(rctx, `ROLLBACK`)
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

// clock is the books' clock when one is set (tests), else nil: the
// server's.
func (s *Store) clock() *time.Time {
	if s.opts.Now == nil {
		return nil
	}
	t := s.opts.Now().UTC()
	return &t
}

var _ store.Books = (*Store)(nil)
