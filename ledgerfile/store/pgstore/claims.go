package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
)

// lockJob creates the job with the claim's budget if it is new, or locks
// it as it is: one statement, so the first claim's deadline and budget are
// the ones every later claim inherits. It also returns the claim's time
// (the server's clock, read once per statement, unless one is given) and
// the earliest expiry of a reservation still held.
const lockJob = `INSERT INTO retrygate_jobs AS j
	(job, started, deadline_ns, max_attempts, token_ceiling, max_wait_ns, max_spend_usd)
	VALUES ($1, COALESCE($2::timestamptz, statement_timestamp()), $3, $4, $5, $6, $7)
	ON CONFLICT (job) DO UPDATE SET job = j.job
	RETURNING started, deadline_ns, max_attempts, token_ceiling, max_wait_ns, max_spend_usd,
		attempts, tokens, spent_usd, reserved_tokens, reserved_usd,
		COALESCE($2::timestamptz, statement_timestamp()),
		(SELECT min(expires) FROM retrygate_reservations r WHERE r.job = $1 AND r.state = 'held')`

// expire counts every held reservation whose time has passed as spent:
// its claimer died or never wrote the row, and the call may have been
// billed.
const expire = `WITH e AS (
		UPDATE retrygate_reservations SET state = 'expired'
		WHERE job = $1 AND state = 'held' AND expires <= $2
		RETURNING tokens, usd)
	UPDATE retrygate_jobs SET
		reserved_tokens = reserved_tokens - (SELECT COALESCE(sum(tokens), 0) FROM e),
		tokens          = tokens          + (SELECT COALESCE(sum(tokens), 0) FROM e),
		reserved_usd    = reserved_usd    - (SELECT COALESCE(sum(usd), 0) FROM e),
		spent_usd       = spent_usd       + (SELECT COALESCE(sum(usd), 0) FROM e)
	WHERE job = $1
	RETURNING tokens, spent_usd, reserved_tokens, reserved_usd`

// reserve takes the attempt: the job's count and reservations, and the
// reservation itself, which lives until its row settles it or it expires.
const reserve = `WITH r AS (
		INSERT INTO retrygate_reservations (job, attempt, claimed, expires, tokens, usd, state)
		VALUES ($1, $2, $3, $4, $5, $6, 'held'))
	UPDATE retrygate_jobs SET attempts = $2,
		reserved_tokens = reserved_tokens + $5, reserved_usd = reserved_usd + $6
	WHERE job = $1`

// Claim reserves the job's next attempt in one transaction, holding the
// job's row lock from the first statement to the commit: admit.Decide
// sees every attempt, token and dollar that any machine has claimed, so
// no two claimers can both take the last of anything.
func (s *Store) Claim(ctx context.Context, req store.Request) (store.Grant, error) {
	if err := req.Budget.Validate(); err != nil {
		return store.Grant{}, err
	}
	at := s.clock()
	if !req.Now.IsZero() {
		t := req.Now.UTC()
		at = &t
	}
	b := req.Budget
	var g store.Grant
	err := s.tx(ctx, func(tx pgx.Tx) error {
		g = store.Grant{}
		var j store.Job
		var deadlineNS, maxWaitNS int64
		var tokenCeiling int64
		var maxSpend float64
		var now time.Time
		var held pgtype.Timestamptz
		err := tx.QueryRow(ctx, lockJob, req.Job, at, int64(b.Deadline), b.MaxAttempts, b.TokenCeiling,
			int64(b.MaxWait), b.MaxSpendUSD).Scan(&j.Started, &deadlineNS, &j.MaxAttempts, &tokenCeiling,
			&maxWaitNS, &maxSpend, &j.Attempts, &j.Tokens, &j.USD, &j.ReservedTokens, &j.ReservedUSD, &now, &held)
		if err != nil {
			return err
		}
		j.Deadline = time.Duration(deadlineNS)
		if held.Valid && !held.Time.After(now) {
			if err := tx.QueryRow(ctx, expire, req.Job, now).Scan(&j.Tokens, &j.USD, &j.ReservedTokens, &j.ReservedUSD); err != nil {
				return err
			}
		}
		jobBudget := admit.Budget{Deadline: j.Deadline, TokenCeiling: tokenCeiling, MaxAttempts: j.MaxAttempts,
			MaxWait: time.Duration(maxWaitNS), MaxSpendUSD: maxSpend}
		n := req.Next
		d, timeout := store.Decide(j, jobBudget, req.Hard, now.Sub(j.Started), n)
		g.Decision, g.Job = d, j
		if !d.Admit {
			return nil
		}
		tokens, usd := admit.ClampTokens(n.Tokens), admit.ClampUSD(n.USD)
		attempt := j.Attempts + 1
		if _, err := tx.Exec(ctx, reserve, req.Job, attempt, now, now.Add(timeout), tokens, usd); err != nil {
			return err
		}
		j.Attempts = attempt
		j.ReservedTokens = admit.AddTokens(j.ReservedTokens, tokens)
		j.ReservedUSD = admit.AddUSD(j.ReservedUSD, usd)
		g.Attempt, g.Timeout, g.Job = attempt, timeout, j
		return nil
	})
	return g, err
}

// queueSettle settles the reservation of r's attempt from r: what the
// attempt really used replaces what was reserved (an expired reservation,
// already counted as spent, is corrected to the real figure). The job's
// row is locked first, as Claim locks it, so the two never deadlock.
func queueSettle(b *pgx.Batch, r *ledgerfile.Row) {
	used := ledgerfile.JobSpend([]ledgerfile.Row{*r})
	b.Queue(`SELECT 1 FROM retrygate_jobs WHERE job = $1 AND EXISTS (
		SELECT 1 FROM retrygate_reservations WHERE job = $1 AND attempt = $2 AND state <> 'settled') FOR UPDATE`,
		r.Job, int32(r.Attempt))
	b.Queue(`WITH s AS (
			UPDATE retrygate_reservations n SET state = 'settled', tokens = $3, usd = $4
			FROM retrygate_reservations o
			WHERE n.job = $1 AND n.attempt = $2 AND n.state <> 'settled'
				AND o.job = n.job AND o.attempt = n.attempt
			RETURNING o.state AS state, o.tokens AS tokens, o.usd AS usd)
		UPDATE retrygate_jobs j SET
			reserved_tokens = j.reserved_tokens - CASE WHEN s.state = 'held' THEN s.tokens ELSE 0 END,
			reserved_usd    = j.reserved_usd    - CASE WHEN s.state = 'held' THEN s.usd ELSE 0 END,
			tokens    = j.tokens    + $3 - CASE WHEN s.state = 'expired' THEN s.tokens ELSE 0 END,
			spent_usd = j.spent_usd + $4 - CASE WHEN s.state = 'expired' THEN s.usd ELSE 0 END
		FROM s WHERE j.job = $1`,
		r.Job, int32(r.Attempt), admit.ClampTokens(used.Tokens), admit.ClampUSD(used.USD))
}

// Done forgets a finished job and its reservations.
func (s *Store) Done(ctx context.Context, job string) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM retrygate_jobs WHERE job = $1`, job)
		return err
	})
}
