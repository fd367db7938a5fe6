// Package pgstore keeps rows and jobs' books in PostgreSQL, so that many
// machines share one log and one budget per job: the store.Log and
// store.Books of a postgres:// URL.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrygate/retrygate/ledgerfile/store"
)

// IsURL reports whether name names a PostgreSQL database rather than a
// file: a postgres:// or postgresql:// URL, or a libpq keyword/value
// connection string (`host=db user=rg dbname=rg`), which pgx reads too.
// A file whose name begins with a libpq keyword and '=' is written with a
// directory in front (./host=x).
func IsURL(name string) bool {
	if strings.HasPrefix(name, "postgres://") || strings.HasPrefix(name, "postgresql://") {
		return true
	}
	k, _, ok := strings.Cut(strings.TrimLeft(name, " \t\n\r\v\f"), "=")
	return ok && libpqKeywords[strings.TrimRight(k, " \t\n\r\v\f")]
}

// libpqKeywords are the connection parameters of libpq's keyword/value
// form (PostgreSQL's "Parameter Key Words"), which pgx accepts.
var libpqKeywords = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true,
	"password": true, "passfile": true, "require_auth": true, "channel_binding": true,
	"connect_timeout": true, "client_encoding": true, "options": true,
	"application_name": true, "fallback_application_name": true, "keepalives": true,
	"keepalives_idle": true, "keepalives_interval": true, "keepalives_count": true,
	"tcp_user_timeout": true, "replication": true, "gssencmode": true, "sslmode": true,
	"requiressl": true, "sslnegotiation": true, "sslcompression": true, "sslcert": true,
	"sslkey": true, "sslpassword": true, "sslcertmode": true, "sslrootcert": true,
	"sslcrl": true, "sslcrldir": true, "sslsni": true, "requirepeer": true,
	"ssl_min_protocol_version": true, "ssl_max_protocol_version": true,
	"krbsrvname": true, "gsslib": true, "gssdelegation": true, "service": true,
	"target_session_attrs": true, "load_balance_hosts": true,
}

// Redact is the connection string with no password and no query or
// options: what output, errors and the log may say. Either form is
// named as a URL (postgres://user@host:port/db).
func Redact(raw string) string {
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" && u.Path == "" {
			return "postgres://(unparsable URL)"
		}
		out := u.Scheme + "://"
		if u.User != nil && u.User.Username() != "" {
			out += u.User.Username() + "@"
		}
		return out + u.Host + u.Path
	}
	cfg, err := pgconn.ParseConfig(raw)
	if err != nil {
		return "postgres://(unparsable connection string)"
	}
	out := "postgres://"
	if cfg.User != "" {
		out += url.PathEscape(cfg.User) + "@"
	}
	return out + net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)) + "/" + url.PathEscape(cfg.Database)
}

// Options tune a Store.
type Options struct {
	// RetryFor bounds how long one operation retries when the server cannot
	// be reached (a restart, a dropped connection), unless the context's
	// deadline comes first. 0 means 15 s.
	RetryFor time.Duration
	// Now is the books' clock; nil means the database server's clock.
	Now func() time.Time
	// MaxConns caps the pool; 0 means pgx's default.
	MaxConns int32
}

// Store is one PostgreSQL database holding a log and jobs' books.
type Store struct {
	pool     *pgxpool.Pool
	name     string // postgres://user@host:port/db, no password
	server   string // host:port/db, for errors
	password string // scrubbed from every error
	opts     Options
}

// Open connects to the database at rawURL and checks that its schema is
// one this binary reads (see Init). Nothing is created.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	s, err := connect(rawURL, opts)
	if err != nil {
		return nil, err
	}
	if err := s.checkSchema(ctx); err != nil {
		s.pool.Close()
		return nil, err
	}
	return s, nil
}

func connect(rawURL string, opts Options) (*Store, error) {
	if opts.RetryFor <= 0 {
		opts.RetryFor = 15 * time.Second
	}
	s := &Store{name: Redact(rawURL), opts: opts}
	if u, err := url.Parse(rawURL); err == nil && u.User != nil {
		s.password, _ = u.User.Password()
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		// pgx's reason may quote a value; never the keyword form's
		// password, which no URL parse above found.
		return nil, fmt.Errorf("bad PostgreSQL connection string %s: %s", s.name, s.scrub(parseMsg(err)))
	}
	if pw := cfg.ConnConfig.Password; pw != "" {
		s.password = pw // either form, or PGPASSWORD
	}
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > 5*time.Second {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "retrygate"
	s.server = fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, s.wrap(err)
	}
	s.pool = pool
	return s, nil
}

// parseMsg is pgx's reason without the connection string it quotes.
func parseMsg(err error) string {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		if u := pe.Unwrap(); u != nil {
			return u.Error()
		}
		msg := pe.Error()
		if i := strings.LastIndex(msg, "`: "); i >= 0 {
			return msg[i+3:]
		}
	}
	return "cannot parse"
}

// Name is the URL without its password.
func (s *Store) Name() string { return s.name }

// Close releases the connections.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Error is a failure at the server: it names the server, never the
// password.
type Error struct {
	Server string
	msg    string
	err    error
}

func (e *Error) Error() string { return "postgres " + e.Server + ": " + e.msg }
func (e *Error) Unwrap() error { return e.err }

func (s *Store) scrub(msg string) string {
	if s.password != "" {
		msg = strings.ReplaceAll(msg, s.password, "xxxxx")
		if esc := url.QueryEscape(s.password); esc != s.password {
			msg = strings.ReplaceAll(msg, esc, "xxxxx")
		}
	}
	return msg
}

func (s *Store) wrap(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	msg := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		msg = "no answer in time (" + msg + ")"
	case isConnErr(err):
		msg = "server unreachable: " + msg
	}
	return &Error{Server: s.server, msg: s.scrub(msg), err: err}
}

// isConnErr reports whether err is the connection failing rather than a
// statement: the server is down, restarting, or the network dropped.
func isConnErr(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03":
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "conn closed")
}

// retryable is an error after which the transaction certainly did not
// commit and may be run again: the connection failed before COMMIT was
// sent (the server rolls the transaction back), or the server chose it as
// a deadlock or serialization victim.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01") {
		return true
	}
	return isConnErr(err)
}

// errCommit marks a failure while COMMIT was under way: the transaction
// may or may not have committed, so it is never retried.
type errCommit struct{ err error }

func (e errCommit) Error() string { return "commit outcome unknown: " + e.err.Error() }
func (e errCommit) Unwrap() error { return e.err }

// tx runs fn in a transaction, again after a failure that certainly did
// not commit, for at most RetryFor or until ctx ends.
func (s *Store) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return s.retry(ctx, func(ctx context.Context) error { return s.once(ctx, fn) })
}

// retry runs once, again after a failure that certainly did not commit,
// for at most RetryFor or until ctx ends.
func (s *Store) retry(ctx context.Context, once func(context.Context) error) error {
	deadline := time.Now().Add(s.opts.RetryFor)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	delay := 50 * time.Millisecond
	for {
		err := once(ctx)
		if err == nil {
			return nil
		}
		var ec errCommit
		if errors.As(err, &ec) || !retryable(err) || ctx.Err() != nil || time.Now().Add(delay).After(deadline) {
			return s.wrap(err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return s.wrap(err)
		case <-t.C:
		}
		delay = min(delay*2, time.Second)
	}
}

func (s *Store) once(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = tx.Rollback(rctx)
		cancel()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return err // the server answered: it did not commit
		}
		return errCommit{err}
	}
	return nil
}

var _ store.Log = (*Store)(nil)
