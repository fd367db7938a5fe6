package pgstore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile/store"
)

// A claim is the job machine's decision on the job's books wherever they
// live: the same claims, at the same times, on a file's books and on the
// database's, get the same decisions, timeouts and spend.
func TestClaimsDecideAlikeOnFileAndPostgres(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var elapsed time.Duration // steps are whole microseconds: the database keeps no finer time
	s, _ := open(t, Options{Now: func() time.Time { return t0.Add(elapsed) }})
	onDB := claims(s)
	onFile := store.Claims{Books: &store.FileBooks{
		Path: filepath.Join(t.TempDir(), "claims.json"),
		// A wall clock set back an hour once the job started: the file's
		// clock is the boot clock's, as the database's is its own.
		Clock: func() (store.Reading, error) {
			wall := t0.Add(elapsed)
			if elapsed > 0 {
				wall = wall.Add(-time.Hour)
			}
			return store.Reading{Wall: wall, Boot: time.Hour + elapsed, BootID: "boot-a"}, nil
		},
	}}
	spendy := admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 1000, MaxAttempts: 3, MaxWait: 5 * time.Second, MaxSpendUSD: 0.10}
	short := admit.Budget{Deadline: time.Second, TokenCeiling: 1000, MaxAttempts: 5, MaxWait: 5 * time.Second}
	capped := admit.Budget{Deadline: time.Hour, TokenCeiling: 1000, MaxAttempts: 2, MaxWait: 5 * time.Second}
	reserve := admit.Next{Tokens: 400, USD: 0.04}
	steps := []struct {
		after time.Duration
		req   store.Request
		done  bool
		want  string
	}{
		{0, store.Request{Job: "spendy", Budget: spendy, Hard: 20 * time.Second, Next: reserve}, false, "admit"},
		{10 * time.Second, store.Request{Job: "spendy", Budget: spendy, Hard: 20 * time.Second, Next: reserve}, false, "admit"},
		{0, store.Request{Job: "spendy", Budget: spendy, Hard: 20 * time.Second, Next: reserve}, false, "refuse: token ceiling"},
		{0, store.Request{Job: "short", Budget: short}, false, "admit"},
		{999 * time.Millisecond, store.Request{Job: "short", Budget: short}, false, "admit"}, // exactly 1 ms left
		{time.Microsecond, store.Request{Job: "short", Budget: short}, false, "refuse: deadline"},
		{0, store.Request{Job: "short"}, true, ""},
		{0, store.Request{Job: "short", Budget: short}, false, "admit"},
		{21 * time.Second, store.Request{Job: "spendy", Budget: spendy, Hard: 20 * time.Second}, false, "admit"}, // both held attempts timed out: 800 tokens spent
		{0, store.Request{Job: "capped", Budget: capped, Hard: 300 * time.Millisecond}, false, "admit"},
		{0, store.Request{Job: "capped", Budget: capped, Hard: 300 * time.Millisecond}, false, "admit"},
		{0, store.Request{Job: "capped", Budget: capped}, false, "refuse: attempt cap"},
		{time.Hour, store.Request{Job: "capped", Budget: capped}, false, "refuse: attempt cap"},
		{0, store.Request{Job: "spendy", Budget: spendy, Next: reserve}, false, "refuse: attempt cap"}, // the deadline too
	}
	for i, st := range steps {
		elapsed += st.after
		name := fmt.Sprintf("step %d (%s)", i+1, st.req.Job)
		if st.done {
			require.NoError(t, onDB.Done(ctx, st.req.Job), name)
			require.NoError(t, onFile.Done(ctx, st.req.Job), name)
			continue
		}
		db, err := onDB.Claim(ctx, st.req)
		require.NoError(t, err, name)
		file, err := onFile.Claim(ctx, st.req)
		require.NoError(t, err, name)
		assert.Equal(t, st.want, db.Decision.String(), name)
		assert.Equal(t, db.Decision, file.Decision, name)
		assert.Equal(t, db.Attempt, file.Attempt, name)
		assert.Equal(t, db.Timeout, file.Timeout, name)
		assert.Equal(t, db.Held, file.Held, name)
		assert.Equal(t, db.Spent, file.Spent, name)
	}
}
