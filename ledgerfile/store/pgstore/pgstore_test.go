package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore/pgtest"
	"github.com/retrygate/retrygate/rehearse/realtime"
)

// open makes a fresh database with the schema and opens it.
func open(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	u := pgtest.DB(t)
	_, err := Init(context.Background(), u)
	require.NoError(t, err)
	s, err := Open(context.Background(), u, opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, u
}

func sqlExec(t testing.TB, u, sql string, args ...any) {
	t.Helper()
	c, err := pgx.Connect(context.Background(), u)
	require.NoError(t, err)
	defer c.Close(context.Background())
	_, err = c.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func TestSchemaInitMigrateAndNewer(t *testing.T) {
	ctx := context.Background()
	u := pgtest.DB(t)

	_, err := Open(ctx, u, Options{})
	require.ErrorIs(t, err, ErrNoSchema)
	assert.Contains(t, err.Error(), "retrygate db init")

	// A database at version 1 (the log only) keeps its rows when a later
	// binary migrates it.
	from, err := initTo(ctx, u, 1)
	require.NoError(t, err)
	assert.Equal(t, 0, from)
	sqlExec(t, u, `INSERT INTO retrygate_rows (job, attempt, wait_ms, elapsed_ms, tokens) VALUES ('j', 1, 1, 2, 3)`)
	_, err = Open(ctx, u, Options{})
	require.ErrorIs(t, err, ErrNoSchema, "an older schema is refused until db init migrates it")
	from, err = Init(ctx, u)
	require.NoError(t, err)
	assert.Equal(t, 1, from)
	s, err := Open(ctx, u, Options{})
	require.NoError(t, err)
	rows, err := s.ReadJob(ctx, "j")
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, int64(3), rows[0].Tokens)
	s.Close()

	// Init again is a no-op.
	from, err = Init(ctx, u)
	require.NoError(t, err)
	assert.Equal(t, SchemaVersion, from)

	// A newer binary's schema is refused, by Open and by Init.
	sqlExec(t, u, `UPDATE retrygate_schema SET version = $1`, SchemaVersion+1)
	_, err = Open(ctx, u, Options{})
	require.ErrorIs(t, err, ErrNewerSchema)
	assert.Contains(t, err.Error(), "upgrade retrygate")
	_, err = Init(ctx, u)
	require.ErrorIs(t, err, ErrNewerSchema)
}

func sampleRows() []ledgerfile.Row {
	ts := time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.UTC)
	return []ledgerfile.Row{
		{TS: ts, Job: "a", Attempt: 1, Seat: "scratch", Model: "m", Wait: 1200 * time.Millisecond, Elapsed: 3 * time.Second,
			TTFB: 100 * time.Millisecond, HasTTFB: true, Tokens: 30, PromptTokens: 10, CompletionTokens: 20, HasSplit: true,
			TokensFrom: "usage", Outcome: admit.ServerError, HTTPStatus: 503, Billing: admit.Free, CostUSD: 0.0003, HasCost: true,
			Delay: 0, HasSpent: true, Decision: "admit", Extra: []ledgerfile.KV{{Key: "zeta", Value: "1"}, {Key: "alpha", Value: "two words"}}},
		{TS: ts.Add(time.Second), Job: "a", Attempt: 2, Seat: "scratch", Wait: 0, Elapsed: 0, Tokens: 0, Decision: "refuse: attempt cap",
			Unsent: true, JobEnd: ledgerfile.JobFailed, Note: "quoted \"note\"", HasSpent: true, SpentS: 3 * time.Second, SpentTokens: 30, Used: 1, SpentUSD: 0.0003},
		{Wait: 18 * time.Second, Elapsed: 9 * time.Second, Tokens: 2400, Decision: "refuse: queue wait"},
	}
}

func TestAppendScanExportMatchesTheFileWriter(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t, Options{})
	rows := sampleRows()
	require.NoError(t, s.CommentLocked(ctx, func(c []string) (string, error) {
		assert.Empty(t, c)
		return "run r1\nsecond line", nil
	}))
	require.NoError(t, s.Append(ctx, rows...))

	path := t.TempDir() + "/rehearsal.log"
	f := store.OpenFile(path, false)
	require.NoError(t, f.Writer().Comment("run r1\nsecond line"))
	require.NoError(t, f.Append(ctx, rows...))
	require.NoError(t, f.Close())

	var fromFile, fromPG bytes.Buffer
	require.NoError(t, store.Export(ctx, store.OpenFile(path, false), &fromFile))
	require.NoError(t, store.Export(ctx, s, &fromPG))
	assert.Equal(t, fromFile.String(), fromPG.String())

	got, err := s.ReadJob(ctx, "a")
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, rows[0].TS, got[0].TS, "nanoseconds survive")
	assert.Equal(t, rows[0].Extra, got[0].Extra, "unknown keys survive, in order")

	err = s.Append(ctx, rows[0])
	require.ErrorIs(t, err, store.ErrDuplicate)
	assert.Contains(t, err.Error(), "(a, 1)")
}

// claims are a database's claims, as `claim --state postgres://…` opens
// them: its books, settled by its rows.
func claims(s *Store) store.Claims { return store.Claims{Books: s, Log: s} }

func TestClaimCapTokensSpendAndSettle(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s, _ := open(t, Options{Now: func() time.Time { return clock }})
	c := claims(s)
	b := admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 1000, MaxAttempts: 3, MaxWait: 5 * time.Second, MaxSpendUSD: 0.10}
	req := store.Request{Job: "j", Budget: b, Hard: 20 * time.Second, Next: admit.Next{Tokens: 400, USD: 0.04}}

	g, err := c.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, g.Decision.Admit)
	assert.Equal(t, 1, g.Attempt)
	assert.Equal(t, 20*time.Second, g.Timeout)

	clock = clock.Add(10 * time.Second)
	g, err = c.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, g.Decision.Admit)
	assert.Equal(t, 2, g.Attempt)

	// Two held attempts count 800 tokens and $0.08: a third would pass the
	// attempt cap but not the token ceiling.
	g, err = c.Claim(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, "refuse: token ceiling", g.Decision.String())
	assert.Equal(t, []admit.Reason{admit.ReasonTokenCeiling, admit.ReasonSpendCeiling}, g.Decision.Failing)
	assert.Equal(t, 2, g.Held)

	// The first attempt's row settles it at what it really used.
	require.NoError(t, s.Append(ctx, ledgerfile.Row{Job: "j", Attempt: 1, Tokens: 100, CostUSD: 0.01, HasCost: true, Decision: "admit", Outcome: admit.OK}))
	clock = clock.Add(19 * time.Second)
	g, err = c.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, g.Decision.Admit, g.Decision.String())
	assert.Equal(t, 3, g.Attempt)
	assert.Equal(t, 16*time.Second, g.Timeout, "what is left of the deadline made by the first claim")
	assert.Equal(t, 1, g.Held)
	assert.Equal(t, int64(500), g.Spent.Tokens, "100 recorded, 400 held")
	assert.InDelta(t, 0.05, g.Spent.USD, 1e-12)

	g, err = c.Claim(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, "refuse: attempt cap", g.Decision.String())

	// A later claim with another budget inherits the first one's.
	req2 := req
	req2.Budget.MaxAttempts = 10
	g, err = c.Claim(ctx, req2)
	require.NoError(t, err)
	assert.Equal(t, "refuse: attempt cap", g.Decision.String())

	require.NoError(t, c.Done(ctx, "j"))
	g, err = c.Claim(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, 1, g.Attempt, "done forgets the job")
}

func TestExpiredClaimCountsAsSpent(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s, _ := open(t, Options{Now: func() time.Time { return clock }})
	c := claims(s)
	b := admit.Budget{Deadline: time.Hour, TokenCeiling: 1000, MaxAttempts: 5, MaxWait: 5 * time.Second, MaxSpendUSD: 1}
	req := store.Request{Job: "j", Budget: b, Hard: 20 * time.Second, Next: admit.Next{Tokens: 300, USD: 0.3}}
	g, err := c.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, g.Decision.Admit)

	// The claimer dies; past its hard timeout the attempt is spent.
	clock = clock.Add(21 * time.Second)
	req.Next = admit.Next{}
	g, err = c.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, g.Decision.Admit)
	assert.Equal(t, int64(300), g.Spent.Tokens)
	assert.Zero(t, g.Held)
	assert.InDelta(t, 0.3, g.Spent.USD, 1e-12)

	// A row arriving late corrects the figure; a second copy is refused.
	late := ledgerfile.Row{Job: "j", Attempt: 1, Tokens: 50, CostUSD: 0.05, HasCost: true, Outcome: admit.OK}
	require.NoError(t, s.Append(ctx, late))
	require.ErrorIs(t, s.Append(ctx, late), store.ErrDuplicate)
	g, err = c.Claim(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, int64(50), g.Spent.Tokens)
	assert.InDelta(t, 0.05, g.Spent.USD, 1e-12)
	assert.Equal(t, 1, g.Held, "the second attempt is held: no row, not timed out")
}

func TestPasswordNeverShown(t *testing.T) {
	ctx := context.Background()
	u := strings.Replace(pgtest.Server(t), "postgres@", "postgres:s3cr3t-pw@", 1)
	u = strings.Replace(u, "/postgres?", "/no_such_db_here?", 1)
	_, err := Open(ctx, u, Options{RetryFor: time.Second})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cr3t-pw")
	assert.Contains(t, err.Error(), "127.0.0.1:")
	assert.Contains(t, err.Error(), "/no_such_db_here")
	assert.NotContains(t, Redact(u), "s3cr3t-pw")

	_, err = Open(ctx, "postgres://u:s3cr3t-pw@127.0.0.1:notaport/db", Options{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cr3t-pw")
}

func TestServerGoneIsAClearErrorNotAHang(t *testing.T) {
	ctx := context.Background()
	// A port nobody listens on: refused at once, retried until RetryFor.
	start := time.Now()
	s, err := connect("postgres://u:pw@127.0.0.1:1/db", Options{RetryFor: 300 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	err = s.Append(ctx, ledgerfile.Row{Job: "x", Attempt: 1})
	require.Error(t, err)
	var pe *Error
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, "127.0.0.1:1/db", pe.Server)
	assert.Contains(t, err.Error(), "postgres 127.0.0.1:1/db: server unreachable")
	assert.NotContains(t, err.Error(), "pw@")
	assert.Less(t, time.Since(start), realtime.By(300*time.Millisecond), "retried until RetryFor, not hung")
}

// Retries stop at the caller's deadline, well before RetryFor.
func TestRetriesStopAtTheCallersDeadline(t *testing.T) {
	s, err := connect("postgres://u@127.0.0.1:1/db", Options{RetryFor: time.Minute})
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = claims(s).Claim(ctx, store.Request{Job: "j", Budget: admit.Budget{Deadline: time.Second, TokenCeiling: 1, MaxAttempts: 1, MaxWait: time.Second}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "postgres 127.0.0.1:1/db: ")
	// A ceiling only a hang reaches (realtime), far short of RetryFor.
	assert.Less(t, time.Since(start), realtime.By(300*time.Millisecond), "bounded by the context, not by RetryFor")
}

// A libpq keyword/value connection string is a database, as pgx reads
// it, and is named as a URL with no password; a path stays a path.
func TestKeywordValueConnectionString(t *testing.T) {
	for name, want := range map[string]bool{
		"postgres://u@h/db":                  true,
		"postgresql://h/db":                  true,
		"host=db.internal user=rg dbname=rg": true,
		"  dbname = rg host=h":               true,
		"password=x host=h":                  true,
		"rehearsal.log":                      false,
		"./host=x":                           false,
		"logs/host=x.log":                    false,
		"hosts=x":                            false,
		"":                                   false,
		"=x":                                 false,
		"host":                               false,
		"service=rg":                         true,
		"sslmode=disable host=127.0.0.1 dbname=rg ": true,
	} {
		assert.Equal(t, want, IsURL(name), "%q", name)
	}
	assert.Equal(t, "postgres://rg@db.internal:5433/rg",
		Redact("host=db.internal port=5433 user=rg password='s3cr3t pw' dbname=rg sslmode=disable"))
	assert.Equal(t, "postgres://(unparsable connection string)", Redact("host=h port=notaport password=s3cr3t-pw"))

	ctx := context.Background()
	_, err := Open(ctx, "host=127.0.0.1 port=notaport user=u password=s3cr3t-pw dbname=db", Options{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cr3t-pw")

	// The test server, by keyword/value: it opens, and a refusal (no such
	// database) names it without the password.
	u, err := url.Parse(pgtest.Server(t))
	require.NoError(t, err)
	kv := fmt.Sprintf("host=%s port=%s user=%s password=s3cr3t-pw dbname=no_such_db_here sslmode=disable",
		u.Hostname(), u.Port(), u.User.Username())
	_, err = Open(ctx, kv, Options{RetryFor: time.Second})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cr3t-pw")
	assert.Contains(t, err.Error(), "no_such_db_here")
}
