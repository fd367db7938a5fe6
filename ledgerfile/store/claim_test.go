package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// These are claims on a file's books, decided by the job machine as the
// database's are (pgstore's TestClaimsDecideAlikeOnFileAndPostgres).

// vclock is a virtual machine: a wall clock anyone may set, a boot clock
// that only moves forward with real time, and a boot id.
type vclock struct {
	mu     sync.Mutex
	wall   time.Time
	boot   time.Duration
	bootID string
}

func (c *vclock) read() (Reading, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Reading{Wall: c.wall, Boot: c.boot, BootID: c.bootID}, nil
}

func (c *vclock) pass(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall, c.boot = c.wall.Add(d), c.boot+d
}

// setWall sets the wall clock, as an operator or NTP might.
func (c *vclock) setWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}

// reboot starts a new boot whose boot clock reads boot, the wall clock
// moved by wall.
func (c *vclock) reboot(id string, boot, wall time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bootID, c.boot, c.wall = id, boot, c.wall.Add(wall)
}

func newClock() *vclock {
	return &vclock{wall: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), boot: 3 * time.Hour, bootID: "boot-a"}
}

func budget(deadline time.Duration, attempts int) admit.Budget {
	return admit.Budget{Deadline: deadline, MaxAttempts: attempts, TokenCeiling: 8000, MaxWait: 5 * time.Second}
}

// fileClaims is a file's claims at path on clock c.
func fileClaims(path string, c *vclock) Claims {
	return Claims{Books: &FileBooks{Path: path, Clock: c.read}}
}

// claimAt is one claim of job "j" through the file, as one claim process
// makes it.
func claimAt(t *testing.T, path string, c *vclock, b admit.Budget, hard time.Duration) Grant {
	t.Helper()
	g, err := fileClaims(path, c).Claim(context.Background(), Request{Job: "j", Budget: b, Hard: hard})
	require.NoError(t, err)
	return g
}

func statePath(t *testing.T) string { return filepath.Join(t.TempDir(), "st", "claims.json") }

func TestFileClaimWallClockJumps(t *testing.T) {
	for _, tc := range []struct {
		name string
		jump time.Duration
	}{
		{"set back an hour", -time.Hour},
		{"set forward 25 hours", 25 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, c := statePath(t), newClock()
			b := budget(2*time.Second, 5)
			g := claimAt(t, path, c, b, 0)
			require.True(t, g.Decision.Admit)
			assert.Equal(t, 2*time.Second, g.Timeout)

			c.pass(500 * time.Millisecond)
			c.setWall(tc.jump) // someone sets the clock
			g = claimAt(t, path, c, b, 0)
			require.True(t, g.Decision.Admit, "the job is still known and has time left")
			assert.Equal(t, 1500*time.Millisecond, g.Timeout, "only the half second that passed is gone")
			assert.Equal(t, 2, g.Attempt, "the job was not forgotten")

			c.pass(1600 * time.Millisecond)
			assert.Equal(t, "refuse: deadline", claimAt(t, path, c, b, 0).Decision.String())
		})
	}
}

func TestFileClaimAfterReboot(t *testing.T) {
	start := func(t *testing.T) (string, *vclock) {
		path, c := statePath(t), newClock()
		require.True(t, claimAt(t, path, c, budget(time.Minute, 5), 0).Decision.Admit)
		c.pass(10 * time.Second)
		require.True(t, claimAt(t, path, c, budget(time.Minute, 5), 0).Decision.Admit)
		return path, c
	}
	t.Run("measured on the wall clock", func(t *testing.T) {
		path, c := start(t)
		c.reboot("boot-b", 5*time.Second, 20*time.Second)
		g := claimAt(t, path, c, budget(time.Minute, 5), 0)
		require.True(t, g.Decision.Admit)
		assert.Equal(t, 30*time.Second, g.Timeout, "10 s before the last claim, 20 s of wall clock since")
		c.pass(5 * time.Second)
		c.setWall(-time.Hour)
		g = claimAt(t, path, c, budget(time.Minute, 5), 0)
		assert.Equal(t, 25*time.Second, g.Timeout, "the new boot's clock again, whatever the wall clock says")
	})
	t.Run("a wall clock that went back gives no time back", func(t *testing.T) {
		path, c := start(t)
		c.reboot("boot-b", time.Second, -time.Hour)
		g := claimAt(t, path, c, budget(time.Minute, 5), 0)
		require.True(t, g.Decision.Admit)
		assert.Equal(t, 50*time.Second, g.Timeout, "never more than was left at the last claim")
	})
	t.Run("another machine without a boot clock", func(t *testing.T) {
		path, c := start(t)
		c.reboot("", 0, 55*time.Second)
		assert.Equal(t, "refuse: deadline", claimAt(t, path, c, budget(time.Minute, 5), 0).Decision.String())
	})
}

func TestFileClaimIsTheGate(t *testing.T) {
	path, c := statePath(t), newClock()
	b := budget(time.Second, 2)
	for i := range 2 {
		g := claimAt(t, path, c, b, 300*time.Millisecond)
		require.True(t, g.Decision.Admit)
		assert.Equal(t, i+1, g.Attempt)
		assert.Equal(t, 300*time.Millisecond, g.Timeout, "capped by the hard timeout")
		assert.Equal(t, i, g.Held, "the attempts granted before are held: used")
	}
	g := claimAt(t, path, c, b, 0)
	assert.Equal(t, "refuse: attempt cap", g.Decision.String())
	assert.Zero(t, g.Attempt)
	c.pass(time.Second)
	assert.Equal(t, "refuse: attempt cap", claimAt(t, path, c, b, 0).Decision.String(),
		"an attempt past its timeout with no row is still used")
}

// Exactly the least an attempt can take left admits (equality admits);
// less refuses, and says only the deadline.
func TestFileClaimLeastAttemptTime(t *testing.T) {
	path, c := statePath(t), newClock()
	b := budget(time.Second, 3)
	claimAt(t, path, c, b, 0)
	c.pass(time.Second - minAttemptTime)
	g := claimAt(t, path, c, b, 0)
	require.True(t, g.Decision.Admit, g.Decision.String())
	assert.Equal(t, minAttemptTime, g.Timeout)
	c.pass(time.Microsecond)
	g = claimAt(t, path, c, b, 0)
	assert.Equal(t, "refuse: deadline", g.Decision.String())
	assert.Equal(t, []admit.Reason{admit.ReasonDeadline}, g.Decision.Failing)
}

// A later claim with another budget inherits the first one's.
func TestFileClaimInheritsTheFirstBudget(t *testing.T) {
	path, c := statePath(t), newClock()
	claimAt(t, path, c, budget(time.Hour, 1), 0)
	assert.Equal(t, "refuse: attempt cap", claimAt(t, path, c, budget(2*time.Hour, 9), 0).Decision.String())
	require.NoError(t, fileClaims(path, c).Done(context.Background(), "j"))
	assert.True(t, claimAt(t, path, c, budget(time.Hour, 1), 0).Decision.Admit, "done forgets the job")
}

func TestFileClaimsKeepStateAcrossClaimsOfOneFile(t *testing.T) {
	path, c := statePath(t), newClock()
	b := budget(time.Hour, 300)
	for i := range 300 {
		g := claimAt(t, path, c, b, 0)
		require.True(t, g.Decision.Admit, "claim %d", i+1)
		require.Equal(t, i+1, g.Attempt)
	}
	assert.Equal(t, "refuse: attempt cap", claimAt(t, path, c, b, 0).Decision.String())
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Less(t, st.Size(), int64(200<<10), "compacted, not grown by one line per claim forever")
}

func TestFileClaimsIgnoreATornLastLine(t *testing.T) {
	path, c := statePath(t), newClock()
	b := budget(time.Hour, 3)
	claimAt(t, path, c, b, 0)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`1234abcd {"version":3,"books":{"claim j":{"atte`) // a writer killed mid-line
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Equal(t, 2, claimAt(t, path, c, b, 0).Attempt, "the torn update never granted anything")
	require.Equal(t, 3, claimAt(t, path, c, b, 0).Attempt, "the update after the torn line is read back")
	assert.Equal(t, "refuse: attempt cap", claimAt(t, path, c, b, 0).Decision.String())
}

// Claim's own state files before the books (versions 1 and 2) are read,
// their jobs carried on with the time they had used and the attempts
// they had taken, and rewritten as books.
func TestFileClaimsReadOlderVersions(t *testing.T) {
	c := newClock()
	for name, state := range map[string]string{
		"version 1": `{"version":1,"jobs":{"j":{"started":"` + c.wall.Add(-10*time.Second).Format(time.RFC3339Nano) +
			`","deadline_ns":60000000000,"max_attempts":3,"attempts":1}}}` + "\n",
		"version 2": string(encodeLine([]byte(`{"version":2,"jobs":{"j":{"started":"` + c.wall.Add(-time.Hour).Format(time.RFC3339Nano) +
			`","deadline_ns":60000000000,"max_attempts":3,"attempts":1,"grants":["a1"],"spent_ns":4000000000,` +
			`"seen":"` + c.wall.Add(-time.Hour).Format(time.RFC3339Nano) + `","seen_boot_ns":` +
			"10794000000000" + `,"boot_id":"boot-a"}}}`))),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "claims.json")
			require.NoError(t, os.WriteFile(path, []byte(state), 0o600))
			g := claimAt(t, path, c, budget(time.Hour, 9), 0)
			require.True(t, g.Decision.Admit)
			// version 1: 10 s of wall clock since it started; version 2: 4 s
			// spent, and 6 s on this boot's clock since it was last seen.
			assert.Equal(t, 50*time.Second, g.Timeout)
			assert.Equal(t, 2, g.Attempt)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.False(t, strings.HasPrefix(string(data), "{"), "rewritten in the new form")
			books, err := ReadFileBooks(path)
			require.NoError(t, err)
			assert.Contains(t, books, ClaimKey("j"))
			assert.Equal(t, 3, claimAt(t, path, c, budget(time.Hour, 9), 0).Attempt)
			assert.Equal(t, "refuse: attempt cap", claimAt(t, path, c, budget(time.Hour, 9), 0).Decision.String(),
				"the cap of the job's first claim")
		})
	}
}

// Jobs are forgotten a day after their deadline, on the file's clock.
func TestFileClaimsForgetADayAfterTheDeadline(t *testing.T) {
	path, c := statePath(t), newClock()
	claimAt(t, path, c, budget(time.Second, 1), 0)
	c.pass(24*time.Hour + time.Second - time.Millisecond)
	assert.Equal(t, "refuse: attempt cap", claimAt(t, path, c, budget(time.Second, 1), 0).Decision.String(),
		"a late claim still refuses")
	c.setWall(-48 * time.Hour)
	c.pass(time.Millisecond)
	g := claimAt(t, path, c, budget(time.Second, 1), 0)
	assert.True(t, g.Decision.Admit, "forgotten: a new job")
	books, err := ReadFileBooks(path)
	require.NoError(t, err)
	assert.Len(t, books, 1)
}

// A claimer whose state file is deleted while it holds it must not grant
// from it: the update goes again, onto the file now at the path, carrying
// the jobs of the file it held.
func TestFileClaimStartsOverWhenTheFileVanishes(t *testing.T) {
	path, c := statePath(t), newClock()
	b := budget(time.Hour, 5)
	claimAt(t, path, c, b, 0)
	runs := 0
	fb := &FileBooks{Path: path, Clock: c.read}
	require.NoError(t, fb.Book(context.Background(), ClaimKey("j"), func(old []byte, now time.Time) (Record, []ledgerfile.Row, error) {
		runs++
		if runs == 1 {
			require.NoError(t, os.RemoveAll(filepath.Dir(path))) // a cleanup, mid-claim
		}
		_, rec, err := claim(Request{Job: "j", Budget: b}, old, nil, now)
		return rec, nil, err
	}))
	assert.GreaterOrEqual(t, runs, 2, "the first run's write went to an unlinked file")
	assert.Equal(t, 3, claimAt(t, path, c, b, 0).Attempt, "the job was carried over, with the claim made on it")
}

func TestMergeClaimCountsEachGrantOnce(t *testing.T) {
	c := newClock()
	now, _ := c.read()
	b := budget(time.Minute, 9)
	take := func(old []byte, at time.Time, b admit.Budget) []byte {
		_, rec, err := claim(Request{Job: "j", Budget: b}, old, nil, at)
		require.NoError(t, err)
		return rec.Data
	}
	a := take(take(nil, now.Wall, b), now.Wall.Add(time.Second), b)
	copyA := take(a, now.Wall.Add(2*time.Second), b) // one more grant, in a copy only
	fresh := take(nil, now.Wall.Add(3*time.Second), budget(30*time.Second, 9))

	m, err := mergeClaim(a, copyA)
	require.NoError(t, err)
	m, err = mergeClaim(m, a) // a arrives twice
	require.NoError(t, err)
	cb, err := ReadClaim(m)
	require.NoError(t, err)
	assert.Len(t, cb.Held, 3)
	assert.Equal(t, 3, cb.Job.Attempts)
	m, err = mergeClaim(fresh, m)
	require.NoError(t, err)
	cb, err = ReadClaim(m)
	require.NoError(t, err)
	assert.Equal(t, 4, cb.Job.Attempts)
	assert.Equal(t, 30*time.Second, cb.Budget.Deadline, "the stricter deadline")
	assert.Equal(t, now.Wall, cb.Job.Start, "the timing of the copy that started first")
	assert.Equal(t, now.Wall.Add(3*time.Second+30*time.Second), cb.Job.Deadline, "the deadline that ends first")
}
