package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
)

const rowColumns = `comment, ts, ts_nanos, job, attempt, seat, model, wait_ms, elapsed_ms, ttfb_ms,
	tokens, prompt_tokens, completion_tokens, tokens_from, outcome, http_status, billing, cost_usd,
	retry_after_ms, error_code, delay_ms, spent_ms, spent_tokens, spent_usd, used, decision, sent,
	holdout, fallback, job_end, prompt_sha, note, extra, cached_tokens, cache_write_tokens,
	reasoning_tokens, ratelimit_remaining_requests, ratelimit_remaining_tokens, ratelimit_reset_ms,
	uncached_usd`

const insertRow = `INSERT INTO retrygate_rows (` + rowColumns + `) VALUES
	($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
	 $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39, $40)`

// ms is a duration as the file writes it: whole milliseconds.
func ms(d time.Duration) int64 { return d.Round(time.Millisecond).Milliseconds() }

func str(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// rowArgs are insertRow's arguments for one row. Absent values are NULL,
// so a reader of the table sees what the file would not have written.
func rowArgs(r *ledgerfile.Row) ([]any, error) {
	a := make([]any, numColumns)
	// a[0] comment: NULL
	if !r.TS.IsZero() {
		ts := r.TS.UTC()
		a[1] = ts.Truncate(time.Microsecond)
		a[2] = int16(ts.Nanosecond() % 1000)
	}
	a[3], a[4] = str(r.Job), opt(r.Attempt > 0, int32(r.Attempt))
	a[5], a[6] = str(r.Seat), str(r.Model)
	a[7], a[8] = ms(r.Wait), ms(r.Elapsed)
	a[9], a[10] = opt(r.HasTTFB, ms(r.TTFB)), r.Tokens
	a[11], a[12] = opt(r.HasSplit, r.PromptTokens), opt(r.HasSplit, r.CompletionTokens)
	a[13], a[14] = str(r.TokensFrom), str(string(r.Outcome))
	a[15], a[16] = opt(r.HTTPStatus != 0, int32(r.HTTPStatus)), str(string(r.Billing))
	a[17], a[18] = opt(r.HasCost, r.CostUSD), opt(r.HasRetryAfter, ms(r.RetryAfter))
	a[19], a[20] = str(r.ErrorCode), opt(r.Delay > 0, ms(r.Delay))
	if r.HasSpent {
		a[21], a[22], a[23], a[24] = ms(r.SpentS), r.SpentTokens, r.SpentUSD, int32(r.Used)
	}
	a[25] = str(r.Decision)
	a[26], a[27], a[28] = !r.Unsent, r.Holdout, r.Fallback
	a[29], a[30], a[31] = str(r.JobEnd), str(r.PromptSHA), str(r.Note)
	// Every key without a column of its own (reserve_usd, connect_s,
	// inflight, window_*, a key this version does not know, ...) rides in
	// extra as the file writes it, so no key is lost to the table.
	var pairs [][2]string
	for _, kv := range ledgerfile.Pairs(r) {
		if !columned[kv.Key] {
			pairs = append(pairs, [2]string{kv.Key, kv.Value})
		}
	}
	if len(pairs) > 0 {
		b, err := json.Marshal(pairs)
		if err != nil {
			return nil, err
		}
		a[32] = string(b)
	}
	a[33], a[34] = opt(r.HasCached, r.CachedTokens), opt(r.HasCacheWrite, r.CacheWriteTokens)
	a[35] = opt(r.HasReasoning, r.ReasoningTokens)
	rl := &r.RateLimit
	a[36], a[37] = opt(rl.HasRequests, rl.RemainingRequests), opt(rl.HasTokens, rl.RemainingTokens)
	a[38], a[39] = opt(rl.HasReset, ms(rl.Reset)), opt(r.UncachedUSD > 0, r.UncachedUSD)
	return a, nil
}

// opt is v, or NULL when the row has no such key.
func opt[T any](has bool, v T) any {
	if has {
		return v
	}
	return nil
}

// columned are the file's keys that have a column of rowColumns; a
// row's other keys are kept in extra.
var columned = map[string]bool{
	"ts": true, "job": true, "attempt": true, "seat": true, "model": true, "wait_s": true,
	"elapsed_s": true, "ttfb_s": true, "tokens": true, "prompt_tokens": true,
	"completion_tokens": true, "tokens_from": true, "outcome": true, "http_status": true,
	"billing": true, "cost_usd": true, "retry_after_s": true, "error_code": true,
	"delay_s": true, "spent_s": true, "spent_tokens": true, "spent_usd": true, "used": true,
	"decision": true, "sent": true, "holdout": true, "fallback": true, "job_end": true,
	"prompt_sha": true, "note": true, "cached_tokens": true, "cache_write_tokens": true,
	"reasoning_tokens": true, "ratelimit_remaining_requests": true,
	"ratelimit_remaining_tokens": true, "ratelimit_reset_s": true, "uncached_usd": true,
}

// numColumns is rowColumns' count.
const numColumns = 40

func commentArgs(line string) []any {
	a := make([]any, numColumns)
	a[0] = line
	return a
}

// scanned holds one row of retrygate_rows without allocating per row:
// text columns are the driver's own bytes (DriverBytes, nil for NULL),
// valid until the next row.
type scanned struct {
	seq                                                     int64
	comment, job, seat, model, tokensFrom, outcome, billing pgtype.DriverBytes
	errorCode, decision, jobEnd, promptSHA, note, extra     pgtype.DriverBytes
	ts                                                      pgtype.Timestamptz
	tsNanos                                                 pgtype.Int2
	attempt, httpStatus, used                               pgtype.Int4
	waitMS, elapsedMS, ttfbMS, tokens, prompt, completion   pgtype.Int8
	retryAfterMS, delayMS, spentMS, spentTokens             pgtype.Int8
	cached, cacheWrite, reasoning                           pgtype.Int8
	rlRequests, rlTokens, rlResetMS                         pgtype.Int8
	cost, spentUSD, uncached                                pgtype.Float8
	sent, holdout, fallback                                 pgtype.Bool
	dst                                                     []any
}

func (s *scanned) dest() []any {
	if s.dst == nil {
		s.dst = []any{&s.seq, &s.comment, &s.ts, &s.tsNanos, &s.job, &s.attempt, &s.seat, &s.model,
			&s.waitMS, &s.elapsedMS, &s.ttfbMS, &s.tokens, &s.prompt, &s.completion, &s.tokensFrom,
			&s.outcome, &s.httpStatus, &s.billing, &s.cost, &s.retryAfterMS, &s.errorCode, &s.delayMS,
			&s.spentMS, &s.spentTokens, &s.spentUSD, &s.used, &s.decision, &s.sent, &s.holdout,
			&s.fallback, &s.jobEnd, &s.promptSHA, &s.note, &s.extra, &s.cached, &s.cacheWrite,
			&s.reasoning, &s.rlRequests, &s.rlTokens, &s.rlResetMS, &s.uncached}
	}
	return s.dst
}

func msDur(v pgtype.Int8) time.Duration { return time.Duration(v.Int64) * time.Millisecond }

// strings turns a row's text into strings: the few values that repeat
// from row to row (seat, model, outcome, decision…) interned, the rest
// either copied (the row outlives the scan) or viewed in place (the row is
// handed to a callback and not kept: Export encodes it at once).
type rowStrings struct {
	in   map[string]string
	keep bool
}

func (st *rowStrings) intern(b []byte) string {
	if b == nil {
		return ""
	}
	if v, ok := st.in[string(b)]; ok {
		return v
	}
	v := string(b)
	if len(st.in) < 4096 {
		st.in[v] = v
	}
	return v
}

func (st *rowStrings) str(b []byte) string {
	switch {
	case len(b) == 0:
		return ""
	case st.keep:
		return string(b)
	}
	return unsafe.String(&b[0], len(b))
}

// row fills r from s; r.Line is the row's place in the table (seq).
func (s *scanned) row(r *ledgerfile.Row, st *rowStrings) error {
	*r = ledgerfile.Row{Line: int(s.seq)}
	if s.ts.Valid {
		r.TS = s.ts.Time.UTC().Add(time.Duration(s.tsNanos.Int16))
	}
	r.Job = st.str(s.job)
	r.Attempt = int(s.attempt.Int32)
	r.Seat, r.Model = st.intern(s.seat), st.intern(s.model)
	r.Wait, r.Elapsed = msDur(s.waitMS), msDur(s.elapsedMS)
	r.TTFB, r.HasTTFB = msDur(s.ttfbMS), s.ttfbMS.Valid
	r.Tokens = s.tokens.Int64
	r.PromptTokens, r.CompletionTokens, r.HasSplit = s.prompt.Int64, s.completion.Int64, s.prompt.Valid
	r.TokensFrom = st.intern(s.tokensFrom)
	r.CachedTokens, r.HasCached = s.cached.Int64, s.cached.Valid
	r.CacheWriteTokens, r.HasCacheWrite = s.cacheWrite.Int64, s.cacheWrite.Valid
	r.ReasoningTokens, r.HasReasoning = s.reasoning.Int64, s.reasoning.Valid
	r.RateLimit = admit.RateLimit{
		RemainingRequests: s.rlRequests.Int64, HasRequests: s.rlRequests.Valid,
		RemainingTokens: s.rlTokens.Int64, HasTokens: s.rlTokens.Valid,
		Reset: msDur(s.rlResetMS), HasReset: s.rlResetMS.Valid,
	}
	r.Outcome = admit.Outcome(st.intern(s.outcome))
	r.HTTPStatus = int(s.httpStatus.Int32)
	r.Billing = admit.Billing(st.intern(s.billing))
	r.CostUSD, r.HasCost = s.cost.Float64, s.cost.Valid
	r.UncachedUSD = s.uncached.Float64
	r.RetryAfter, r.HasRetryAfter = msDur(s.retryAfterMS), s.retryAfterMS.Valid
	r.ErrorCode = st.intern(s.errorCode)
	r.Delay = msDur(s.delayMS)
	if s.spentMS.Valid {
		r.HasSpent = true
		r.SpentS, r.SpentTokens, r.SpentUSD, r.Used = msDur(s.spentMS), s.spentTokens.Int64, s.spentUSD.Float64, int(s.used.Int32)
	}
	r.Decision = st.intern(s.decision)
	r.Unsent = s.sent.Valid && !s.sent.Bool
	r.Holdout, r.Fallback = s.holdout.Bool, s.fallback.Bool
	r.JobEnd = st.intern(s.jobEnd)
	r.PromptSHA, r.Note = st.str(s.promptSHA), st.str(s.note)
	if len(s.extra) > 0 {
		var pairs [][2]string
		if err := json.Unmarshal(s.extra, &pairs); err != nil {
			return fmt.Errorf("row %d: extra: %w", s.seq, err)
		}
		r.Extra = make([]ledgerfile.KV, 0, len(pairs))
		for _, p := range pairs {
			known, err := ledgerfile.SetField(r, p[0], p[1])
			if err != nil {
				return fmt.Errorf("row %d: extra: %w", s.seq, err)
			}
			if !known {
				r.Extra = append(r.Extra, ledgerfile.KV{Key: p[0], Value: p[1]})
			}
		}
		if len(r.Extra) == 0 {
			r.Extra = nil
		}
	}
	return nil
}

// Append writes rows in one transaction. (A claim's held attempt is
// settled by its row when the job is next claimed: store.Claims.)
func (s *Store) Append(ctx context.Context, rows ...ledgerfile.Row) error {
	if len(rows) == 0 {
		return nil
	}
	return s.tx(ctx, func(tx pgx.Tx) error { return s.insert(ctx, tx, rows) })
}

func (s *Store) insert(ctx context.Context, tx pgx.Tx, rows []ledgerfile.Row) error {
	b := &pgx.Batch{}
	if err := queueRows(b, rows); err != nil {
		return err
	}
	return s.duplicate(tx.SendBatch(ctx, b).Close())
}

// queueRows queues the insert of each row.
func queueRows(b *pgx.Batch, rows []ledgerfile.Row) error {
	for i := range rows {
		args, err := rowArgs(&rows[i])
		if err != nil {
			return err
		}
		b.Queue(insertRow, args...)
	}
	return nil
}

// duplicate is err as store.ErrDuplicate when it is the rows table's
// (job, attempt) key refusing a second row, else err.
func (s *Store) duplicate(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "retrygate_rows_job_attempt_key" {
		return fmt.Errorf("%w already in %s: %s", store.ErrDuplicate, s.name, pe.Detail)
	}
	return err
}

// AppendJob holds a lock on the job (every AppendJob of one job waits
// for the one before), reads its rows, and appends fn's rows in the same
// transaction.
func (s *Store) AppendJob(ctx context.Context, job string, fn func([]ledgerfile.Row) ([]ledgerfile.Row, error)) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 7262788367))`, job); err != nil {
			return err
		}
		earlier, err := readRows(ctx, tx, `WHERE job = $1`, job)
		if err != nil {
			return err
		}
		rows, err := fn(earlier)
		if err != nil || len(rows) == 0 {
			return err
		}
		return s.insert(ctx, tx, rows)
	})
}

// CommentLocked appends one comment line, fn having seen every comment
// before it under a log-wide lock.
func (s *Store) CommentLocked(ctx context.Context, fn func([]string) (string, error)) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7262788368)`); err != nil {
			return err
		}
		rs, err := tx.Query(ctx, `SELECT comment FROM retrygate_rows WHERE comment IS NOT NULL ORDER BY seq`)
		if err != nil {
			return err
		}
		comments, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil {
			return err
		}
		text, err := fn(comments)
		if err != nil || text == "" {
			return err
		}
		_, err = tx.Exec(ctx, insertRow, commentArgs(ledgerfile.CommentLine(text))...)
		return err
	})
}

// AppendEntries writes rows and comment lines (kept as they are, "# …")
// in order, in one transaction: what `log import` loads.
func (s *Store) AppendEntries(ctx context.Context, entries []store.Entry) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, e := range entries {
			if e.Row == nil {
				b.Queue(insertRow, commentArgs(e.Comment)...)
				continue
			}
			args, err := rowArgs(e.Row)
			if err != nil {
				return err
			}
			b.Queue(insertRow, args...)
		}
		return s.duplicate(tx.SendBatch(ctx, b).Close())
	})
}

// ReadJob returns one job's rows, or every row when job is "".
func (s *Store) ReadJob(ctx context.Context, job string) ([]ledgerfile.Row, error) {
	var rows []ledgerfile.Row
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		if job == "" {
			rows, err = readRows(ctx, tx, `WHERE comment IS NULL`)
		} else {
			rows, err = readRows(ctx, tx, `WHERE job = $1`, job)
		}
		return err
	})
	return rows, err
}

func readRows(ctx context.Context, tx pgx.Tx, where string, args ...any) ([]ledgerfile.Row, error) {
	var out []ledgerfile.Row
	var sc scanned
	st := &rowStrings{in: map[string]string{}, keep: true}
	_, err := eachLine(ctx, tx, &sc, `SELECT seq, `+rowColumns+` FROM retrygate_rows `+where+` ORDER BY seq`, args, func() error {
		var r ledgerfile.Row
		if err := sc.row(&r, st); err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// eachLine runs query, whose columns are seq and rowColumns, scanning each
// line into sc for fn; it returns how many lines came.
func eachLine(ctx context.Context, tx pgx.Tx, sc *scanned, query string, args []any, fn func() error) (int, error) {
	rs, err := tx.Query(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	defer rs.Close()
	n := 0
	for rs.Next() {
		n++
		if err := rs.Scan(sc.dest()...); err != nil {
			return n, err
		}
		if err := fn(); err != nil {
			return n, err
		}
	}
	return n, rs.Err()
}

// scanBatch is how many lines one FETCH brings: memory stays bounded
// whatever the log's size.
const scanBatch = 2000

// Scan streams every line in order through a server-side cursor.
func (s *Store) Scan(ctx context.Context, fn func(store.Entry) error) error {
	// A failure inside fn is the caller's, not the server's: not retried.
	var fnErr error
	started := false
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if started {
			// Entries were handed out: a retry would hand them out twice.
			return errors.New("connection lost in the middle of reading the log")
		}
		if _, err := tx.Exec(ctx, `DECLARE retrygate_scan NO SCROLL CURSOR FOR SELECT seq, `+rowColumns+` FROM retrygate_rows ORDER BY seq`); err != nil {
			return err
		}
		var sc scanned
		var row ledgerfile.Row
		st := &rowStrings{in: map[string]string{}}
		for {
			n, err := eachLine(ctx, tx, &sc, fmt.Sprintf(`FETCH FORWARD %d FROM retrygate_scan`, scanBatch), nil, func() error {
				started = true
				var e store.Entry
				if sc.comment != nil {
					e.Comment = string(sc.comment)
				} else {
					if err := sc.row(&row, st); err != nil {
						return err
					}
					e.Row = &row
				}
				fnErr = fn(e)
				return fnErr
			})
			if err != nil || n < scanBatch {
				return err
			}
		}
	})
	if fnErr != nil {
		return fnErr
	}
	return err
}
