package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// migrations[i] takes a database from schema version i to i+1. A released
// step never changes; a new version appends one.
var migrations = []string{
	// 1: the log. One line per row: a row's v1 keys in typed columns
	// (durations in milliseconds, as the file writes them), keys this
	// version does not know in extra as [[key, value], …] in their order,
	// and comment lines (`# run`, `# policy`) with every other column null.
	`CREATE TABLE retrygate_rows (
		seq               bigserial PRIMARY KEY,
		comment           text,
		ts                timestamptz,
		ts_nanos          smallint,  -- nanoseconds past ts's microsecond
		job               text,
		attempt           integer,
		seat              text,
		model             text,
		wait_ms           bigint,
		elapsed_ms        bigint,
		ttfb_ms           bigint,
		tokens            bigint,
		prompt_tokens     bigint,
		completion_tokens bigint,
		tokens_from       text,
		outcome           text,
		http_status       integer,
		billing           text,
		cost_usd          double precision,
		retry_after_ms    bigint,
		error_code        text,
		delay_ms          bigint,
		spent_ms          bigint,
		spent_tokens      bigint,
		spent_usd         double precision,
		used              integer,
		decision          text,
		sent              boolean,
		holdout           boolean,
		fallback          boolean,
		job_end           text,
		prompt_sha        text,
		note              text,
		extra             jsonb,
		UNIQUE (job, attempt),
		CHECK ((comment IS NULL) <> (tokens IS NULL))
	)`,
	// 2: claims. A job's budget and deadline are fixed by its first claim
	// and inherited; attempts, tokens and spend are claimed under the row's
	// lock. Each claimed attempt holds a reservation until its row settles
	// it, or its hard timeout expires it (counted as spent: the call may
	// have been billed). No longer written or read: claims keep their jobs
	// in retrygate_books (store.Claims), as the proxies do.
	`CREATE TABLE retrygate_jobs (
		job             text PRIMARY KEY,
		started         timestamptz NOT NULL,
		deadline_ns     bigint NOT NULL,
		max_attempts    integer NOT NULL,
		token_ceiling   bigint NOT NULL,
		max_wait_ns     bigint NOT NULL,
		max_spend_usd   double precision NOT NULL,
		attempts        integer NOT NULL DEFAULT 0,
		tokens          bigint NOT NULL DEFAULT 0,
		spent_usd       double precision NOT NULL DEFAULT 0,
		reserved_tokens bigint NOT NULL DEFAULT 0,
		reserved_usd    double precision NOT NULL DEFAULT 0
	);
	CREATE TABLE retrygate_reservations (
		job      text NOT NULL REFERENCES retrygate_jobs ON DELETE CASCADE,
		attempt  integer NOT NULL,
		claimed  timestamptz NOT NULL,
		expires  timestamptz NOT NULL,
		tokens   bigint NOT NULL,
		usd      double precision NOT NULL,
		state    text NOT NULL CHECK (state IN ('held', 'expired', 'settled')),
		PRIMARY KEY (job, attempt)
	);
	CREATE INDEX retrygate_reservations_held ON retrygate_reservations (expires) WHERE state = 'held'`,
	// 3: books (books.go). One record per key, opaque to the store: the
	// proxy's job books, read and replaced under the row's lock so that
	// several proxies share one budget per job. due is when a sweep looks
	// at the key again (a job's deadline, then the end of its retention).
	`CREATE TABLE retrygate_books (
		key  text PRIMARY KEY,
		due  timestamptz NOT NULL,
		book bytea
	);
	CREATE INDEX retrygate_books_due ON retrygate_books (due)`,
	// 4: token parts, the cost without cache pricing and rate-limit
	// state (issue 26). NULL where the row
	// has no such key, as in the file.
	`ALTER TABLE retrygate_rows
		ADD COLUMN cached_tokens                bigint,
		ADD COLUMN cache_write_tokens           bigint,
		ADD COLUMN reasoning_tokens             bigint,
		ADD COLUMN ratelimit_remaining_requests bigint,
		ADD COLUMN ratelimit_remaining_tokens   bigint,
		ADD COLUMN ratelimit_reset_ms           bigint,
		ADD COLUMN uncached_usd                 double precision`,
}

// SchemaVersion is the schema this binary writes and reads.
var SchemaVersion = len(migrations)

// ErrNoSchema is a database `retrygate db init` has not set up.
var ErrNoSchema = errors.New("no retrygate schema")

// ErrNewerSchema is a database a newer retrygate has migrated.
var ErrNewerSchema = errors.New("schema is newer than this retrygate")

// Init creates the schema, or migrates an older one to SchemaVersion, in
// one transaction, under a lock so that two inits never race. It returns
// the version found before.
func Init(ctx context.Context, rawURL string) (from int, err error) {
	return initTo(ctx, rawURL, SchemaVersion)
}

func initTo(ctx context.Context, rawURL string, to int) (from int, err error) {
	s, err := connect(rawURL, Options{RetryFor: 5 * time.Second})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	err = s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7262788367)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS retrygate_schema (
			one boolean PRIMARY KEY DEFAULT true CHECK (one),
			version integer NOT NULL)`); err != nil {
			return err
		}
		from = 0
		err := tx.QueryRow(ctx, `SELECT version FROM retrygate_schema`).Scan(&from)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if from > SchemaVersion {
			return s.newer(from)
		}
		for v := from; v < to; v++ {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migrating to schema version %d: %w", v+1, err)
			}
		}
		if from < to {
			_, err = tx.Exec(ctx, `INSERT INTO retrygate_schema (version) VALUES ($1)
				ON CONFLICT (one) DO UPDATE SET version = excluded.version`, to)
		}
		return err
	})
	return from, err
}

func (s *Store) newer(v int) error {
	return &Error{Server: s.server, err: ErrNewerSchema,
		msg: fmt.Sprintf("schema version %d is newer than this retrygate reads (%d): upgrade retrygate", v, SchemaVersion)}
}

// firstContact bounds the first query of a run. A server that is down
// refuses the connection at once, and one that cannot be reached is cut
// by the connect timeout (5 s); this bounds a server that took the
// connection and does not answer, with room for one that is only busy
// (many machines starting at once on a loaded host took over 2 s).
const firstContact = 10 * time.Second

// checkSchema refuses a database without the schema, or with one this
// binary does not know.
func (s *Store) checkSchema(ctx context.Context) error {
	var v int
	// At the start nothing is in flight: a server that is down now is
	// reported within seconds, not after the mid-run retry budget.
	ctx, cancel := context.WithTimeout(ctx, firstContact)
	defer cancel()
	err := s.tx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT version FROM retrygate_schema`).Scan(&v)
	})
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "42P01", errors.Is(err, pgx.ErrNoRows):
		return &Error{Server: s.server, err: ErrNoSchema,
			msg: fmt.Sprintf("no retrygate schema (run: retrygate db init %s)", s.name)}
	case err != nil:
		return err
	case v > SchemaVersion:
		return s.newer(v)
	case v < SchemaVersion:
		return &Error{Server: s.server, err: ErrNoSchema,
			msg: fmt.Sprintf("schema version %d is older than this retrygate's (%d) (run: retrygate db init %s)", v, SchemaVersion, s.name)}
	}
	return nil
}
