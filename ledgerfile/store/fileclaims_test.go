package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile/claims"
)

// These are the file's claims, decided by Decide as the database's are.

// vclock is a virtual machine: a wall clock anyone may set, a boot clock
// that only moves forward with real time, and a boot id.
type vclock struct {
	wall   time.Time
	boot   time.Duration
	bootID string
}

func (c *vclock) read() claims.Reading {
	return claims.Reading{Wall: c.wall, Boot: c.boot, BootID: c.bootID}
}
func (c *vclock) pass(d time.Duration) { c.wall = c.wall.Add(d); c.boot += d }

func newClock() *vclock {
	return &vclock{wall: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), boot: 3 * time.Hour, bootID: "boot-a"}
}

func budget(deadline time.Duration, attempts int) admit.Budget {
	return admit.Budget{Deadline: deadline, MaxAttempts: attempts, TokenCeiling: 8000, MaxWait: 5 * time.Second}
}

func emptyState() *claims.State { return &claims.State{Version: 2, Jobs: map[string]claims.Job{}} }

func clone(s *claims.State) *claims.State {
	out := emptyState()
	for k, v := range s.Jobs {
		out.Jobs[k] = v
	}
	return out
}

// claimIn is one claim of job on the state s at now.
func claimIn(s *claims.State, job string, b admit.Budget, hard time.Duration, now claims.Reading) Grant {
	return fileClaim(s, Request{Job: job, Budget: b, Hard: hard}, now)
}

func TestFileClaimWallClockJumps(t *testing.T) {
	for _, tc := range []struct {
		name string
		jump time.Duration
	}{
		{"set back an hour", -time.Hour},
		{"set forward 25 hours", 25 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			s := emptyState()
			g := claimIn(s, "j", budget(2*time.Second, 5), 0, c.read())
			require.True(t, g.Decision.Admit)
			assert.Equal(t, 2*time.Second, g.Timeout)

			c.pass(500 * time.Millisecond)
			c.wall = c.wall.Add(tc.jump) // someone sets the clock
			claims.Tidy(s, c.read())
			g = claimIn(s, "j", budget(2*time.Second, 5), 0, c.read())
			require.True(t, g.Decision.Admit, "the job is still known and has time left")
			assert.Equal(t, 1500*time.Millisecond, g.Timeout, "only the half second that passed is gone")
			assert.Equal(t, 2, g.Job.Attempts, "the job was not forgotten")

			c.pass(1600 * time.Millisecond)
			g = claimIn(s, "j", budget(2*time.Second, 5), 0, c.read())
			assert.Equal(t, "refuse: deadline", g.Decision.String())
		})
	}
}

func TestFileClaimAfterReboot(t *testing.T) {
	c := newClock()
	s := emptyState()
	require.True(t, claimIn(s, "j", budget(time.Minute, 5), 0, c.read()).Decision.Admit)
	c.pass(10 * time.Second)
	require.True(t, claimIn(s, "j", budget(time.Minute, 5), 0, c.read()).Decision.Admit)

	t.Run("measured on the wall clock", func(t *testing.T) {
		s := clone(s)
		r := &vclock{wall: c.wall.Add(20 * time.Second), boot: 5 * time.Second, bootID: "boot-b"}
		g := claimIn(s, "j", budget(time.Minute, 5), 0, r.read())
		require.True(t, g.Decision.Admit)
		assert.Equal(t, 30*time.Second, g.Timeout, "10 s before the last claim, 20 s of wall clock since")
		assert.Equal(t, "boot-b", s.Jobs["j"].BootID, "later claims are measured on the new boot's clock")
		r.pass(5 * time.Second)
		r.wall = r.wall.Add(-time.Hour)
		g = claimIn(s, "j", budget(time.Minute, 5), 0, r.read())
		assert.Equal(t, 25*time.Second, g.Timeout, "the new boot's clock again, whatever the wall clock says")
	})
	t.Run("a wall clock that went back gives no time back", func(t *testing.T) {
		s := clone(s)
		r := &vclock{wall: c.wall.Add(-time.Hour), boot: time.Second, bootID: "boot-b"}
		g := claimIn(s, "j", budget(time.Minute, 5), 0, r.read())
		require.True(t, g.Decision.Admit)
		assert.Equal(t, 50*time.Second, g.Timeout, "never more than was left at the last claim")
	})
	t.Run("another machine without a boot clock", func(t *testing.T) {
		s := clone(s)
		r := claims.Reading{Wall: c.wall.Add(55 * time.Second)}
		g := claimIn(s, "j", budget(time.Minute, 5), 0, r)
		assert.Equal(t, "refuse: deadline", g.Decision.String())
	})
}

func TestFileClaimIsTheGate(t *testing.T) {
	c := newClock()
	s := emptyState()
	b := budget(time.Second, 2)
	for i := range 2 {
		g := claimIn(s, "j", b, 300*time.Millisecond, c.read())
		require.True(t, g.Decision.Admit)
		assert.Equal(t, i+1, g.Attempt)
		assert.Equal(t, 300*time.Millisecond, g.Timeout, "capped by the hard timeout")
	}
	g := claimIn(s, "j", b, 0, c.read())
	assert.Equal(t, "refuse: attempt cap", g.Decision.String())
	assert.Zero(t, g.Attempt)

	c.pass(time.Second - 500*time.Microsecond) // less than the 1 ms claim can print is left
	g = claimIn(s, "k", budget(time.Second, 3), 0, c.read())
	require.True(t, g.Decision.Admit)
	c.pass(time.Second - 500*time.Microsecond)
	g = claimIn(s, "k", budget(time.Second, 3), 0, c.read())
	assert.Equal(t, "refuse: deadline", g.Decision.String())
	assert.Equal(t, []admit.Reason{admit.ReasonDeadline}, g.Decision.Failing)
}

// The file's claims and the database's are one decision: Decide, on the
// deadline and attempts, with the one least time an attempt can take.
func TestFileClaimIsDecide(t *testing.T) {
	c := newClock()
	s := emptyState()
	b := budget(time.Second, 3)
	claimIn(s, "j", b, 0, c.read())
	c.pass(time.Second - minAttemptTime)
	j := Job{Started: s.Jobs["j"].Started, Deadline: time.Second, MaxAttempts: 3, Attempts: 1}
	// The file keeps the deadline and the attempts: its other numbers are wide open.
	wide := admit.Budget{Deadline: time.Second, MaxAttempts: 3, TokenCeiling: admit.MaxTokens, MaxWait: admit.MaxDuration}
	want, wantT := Decide(j, wide, 0, time.Second-minAttemptTime, admit.Next{})
	g := claimIn(s, "j", b, 0, c.read())
	require.True(t, want.Admit)
	assert.Equal(t, want, g.Decision)
	assert.Equal(t, wantT, g.Timeout)
	assert.Equal(t, minAttemptTime, g.Timeout, "exactly the least an attempt can take is left: equality admits")
	c.pass(time.Microsecond)
	assert.Equal(t, "refuse: deadline", claimIn(s, "j", b, 0, c.read()).Decision.String(), "less than the least is left")
}

// claimOnce is one claim through the file, as one claim process makes it.
func claimOnce(t *testing.T, path string, c *vclock, b admit.Budget) Grant {
	t.Helper()
	fc := &FileClaims{Path: path, Clock: func() (claims.Reading, error) { return c.read(), nil }}
	g, err := fc.Claim(context.Background(), Request{Job: "j", Budget: b})
	require.NoError(t, err)
	return g
}

func TestFileClaimsKeepStateAcrossProcessesOfOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st", "claims.json")
	c := newClock()
	b := budget(time.Hour, 300)
	for i := range 300 {
		g := claimOnce(t, path, c, b)
		require.True(t, g.Decision.Admit, "claim %d", i+1)
		require.Equal(t, i+1, g.Job.Attempts)
	}
	assert.Equal(t, "refuse: attempt cap", claimOnce(t, path, c, b).Decision.String())
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Less(t, st.Size(), int64(80<<10), "compacted, not grown by one line per claim forever")
}

func TestFileClaimsIgnoreATornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claims.json")
	c := newClock()
	b := budget(time.Hour, 3)
	claimOnce(t, path, c, b)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`1234abcd {"version":2,"jobs":{"j":{"atte`) // a writer killed mid-line
	require.NoError(t, err)
	require.NoError(t, f.Close())
	g := claimOnce(t, path, c, b)
	require.Equal(t, 2, g.Job.Attempts, "the torn update never granted anything")
	g = claimOnce(t, path, c, b)
	require.Equal(t, 3, g.Job.Attempts, "the update after the torn line is read back")
	assert.Equal(t, "refuse: attempt cap", claimOnce(t, path, c, b).Decision.String())
}

func TestFileClaimsReadVersionOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claims.json")
	c := newClock()
	v1 := `{"version":1,"jobs":{"j":{"started":"` + c.wall.Add(-10*time.Second).Format(time.RFC3339Nano) +
		`","deadline_ns":60000000000,"max_attempts":3,"attempts":1}}}` + "\n"
	require.NoError(t, os.WriteFile(path, []byte(v1), 0o600))
	g := claimOnce(t, path, c, budget(time.Hour, 9))
	require.True(t, g.Decision.Admit)
	assert.Equal(t, 50*time.Second, g.Timeout)
	assert.Equal(t, 2, g.Job.Attempts)
	data, _ := os.ReadFile(path)
	assert.False(t, strings.HasPrefix(string(data), "{"), "rewritten in the new form")
}

// A claimer whose state file is deleted while it holds it must not grant
// from it: the update goes again, onto the file now at the path.
func TestFileClaimStartsOverWhenTheFileVanishes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st", "claims.json")
	c := newClock()
	b := budget(time.Hour, 5)
	claimOnce(t, path, c, b)
	runs := 0
	var g Grant
	require.NoError(t, claims.Update(context.Background(), path, func(s *claims.State) error {
		runs++
		if runs == 1 {
			require.NoError(t, os.RemoveAll(filepath.Dir(path))) // a cleanup, mid-claim
		}
		g = claimIn(s, "j", b, 0, c.read())
		return nil
	}))
	assert.GreaterOrEqual(t, runs, 2, "the first run's write went to an unlinked file")
	assert.Equal(t, 2, g.Job.Attempts, "the claimer held the removed file: it carried the job over, and its grant is in the new file")
	assert.Equal(t, 3, claimOnce(t, path, c, b).Job.Attempts)
}
