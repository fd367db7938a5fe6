package pgstore

import (
	"context"
	"errors"
)

// Writable reports whether rows can be appended now, in one round trip
// that writes nothing: the server answers, the session is not read-only
// (a standby, default_transaction_read_only) and the user may insert into
// the rows table. The proxy's /readyz asks it.
func (s *Store) Writable(ctx context.Context) error {
	var readOnly, insert bool
	err := s.pool.QueryRow(ctx, `SELECT current_setting('transaction_read_only') = 'on', has_table_privilege('retrygate_rows', 'INSERT')`).Scan(&readOnly, &insert)
	switch {
	case err != nil:
		return s.wrap(err)
	case readOnly:
		return s.wrap(errors.New("read-only (a standby, or default_transaction_read_only): rows cannot be appended"))
	case !insert:
		return s.wrap(errors.New("this user may not insert into retrygate_rows"))
	}
	return nil
}
