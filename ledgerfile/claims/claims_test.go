package claims

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"retrygate/admit"
)

// vclock is a virtual machine: a wall clock anyone may set, a boot clock
// that only moves forward with real time, and a boot id.
type vclock struct {
	wall   time.Time
	boot   time.Duration
	bootID string
}

func (c *vclock) read() Reading        { return Reading{Wall: c.wall, Boot: c.boot, BootID: c.bootID} }
func (c *vclock) pass(d time.Duration) { c.wall = c.wall.Add(d); c.boot += d }

func newClock() *vclock {
	return &vclock{wall: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), boot: 3 * time.Hour, bootID: "boot-a"}
}

func budget(deadline time.Duration, attempts int) admit.Budget {
	return admit.Budget{Deadline: deadline, MaxAttempts: attempts, TokenCeiling: 8000, MaxWait: 5 * time.Second}
}

func TestClaimWallClockJumps(t *testing.T) {
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
			g := Claim(s, "j", budget(2*time.Second, 5), 0, c.read())
			require.True(t, g.Decision.Admit)
			assert.Equal(t, 2*time.Second, g.Timeout)

			c.pass(500 * time.Millisecond)
			c.wall = c.wall.Add(tc.jump) // someone sets the clock
			Tidy(s, c.read())
			g = Claim(s, "j", budget(2*time.Second, 5), 0, c.read())
			require.True(t, g.Decision.Admit, "the job is still known and has time left")
			assert.Equal(t, 1500*time.Millisecond, g.Timeout, "only the half second that passed is gone")
			assert.Equal(t, 2, g.Job.Attempts, "the job was not forgotten")

			c.pass(1600 * time.Millisecond)
			g = Claim(s, "j", budget(2*time.Second, 5), 0, c.read())
			assert.Equal(t, "refuse: deadline", g.Decision.String())
		})
	}
}

func TestClaimAfterReboot(t *testing.T) {
	c := newClock()
	s := emptyState()
	require.True(t, Claim(s, "j", budget(time.Minute, 5), 0, c.read()).Decision.Admit)
	c.pass(10 * time.Second)
	require.True(t, Claim(s, "j", budget(time.Minute, 5), 0, c.read()).Decision.Admit)

	t.Run("measured on the wall clock", func(t *testing.T) {
		s := clone(s)
		r := &vclock{wall: c.wall.Add(20 * time.Second), boot: 5 * time.Second, bootID: "boot-b"}
		g := Claim(s, "j", budget(time.Minute, 5), 0, r.read())
		require.True(t, g.Decision.Admit)
		assert.Equal(t, 30*time.Second, g.Timeout, "10 s before the last claim, 20 s of wall clock since")
		assert.Equal(t, "boot-b", g.Job.BootID, "later claims are measured on the new boot's clock")
		r.pass(5 * time.Second)
		r.wall = r.wall.Add(-time.Hour)
		g = Claim(s, "j", budget(time.Minute, 5), 0, r.read())
		assert.Equal(t, 25*time.Second, g.Timeout, "the new boot's clock again, whatever the wall clock says")
	})
	t.Run("a wall clock that went back gives no time back", func(t *testing.T) {
		s := clone(s)
		r := &vclock{wall: c.wall.Add(-time.Hour), boot: time.Second, bootID: "boot-b"}
		g := Claim(s, "j", budget(time.Minute, 5), 0, r.read())
		require.True(t, g.Decision.Admit)
		assert.Equal(t, 50*time.Second, g.Timeout, "never more than was left at the last claim")
	})
	t.Run("another machine without a boot clock", func(t *testing.T) {
		s := clone(s)
		r := Reading{Wall: c.wall.Add(55 * time.Second)}
		g := Claim(s, "j", budget(time.Minute, 5), 0, r)
		assert.Equal(t, "refuse: deadline", g.Decision.String())
	})
}

func clone(s *State) *State {
	out := emptyState()
	for k, v := range s.Jobs {
		out.Jobs[k] = v
	}
	return out
}

func TestClaimIsTheGate(t *testing.T) {
	c := newClock()
	s := emptyState()
	b := budget(time.Second, 2)
	for range 2 {
		require.True(t, Claim(s, "j", b, 300*time.Millisecond, c.read()).Decision.Admit)
	}
	g := Claim(s, "j", b, 0, c.read())
	assert.Equal(t, "refuse: attempt cap", g.Decision.String())

	c.pass(time.Second - 500*time.Microsecond) // less than the 1 ms claim can print is left
	g = Claim(s, "k", budget(time.Second, 3), 0, c.read())
	require.True(t, g.Decision.Admit)
	c.pass(time.Second - 500*time.Microsecond)
	g = Claim(s, "k", budget(time.Second, 3), 0, c.read())
	assert.Equal(t, "refuse: deadline", g.Decision.String())
	assert.Equal(t, []admit.Reason{admit.ReasonDeadline}, g.Decision.Failing)
}

func TestTidyForgetsADayAfterTheDeadline(t *testing.T) {
	c := newClock()
	s := emptyState()
	Claim(s, "j", budget(time.Second, 1), 0, c.read())
	c.pass(24*time.Hour + time.Second)
	Tidy(s, c.read())
	assert.Contains(t, s.Jobs, "j")
	c.pass(time.Millisecond)
	Tidy(s, c.read())
	assert.NotContains(t, s.Jobs, "j")
}

func claimOnce(t *testing.T, path string, c *vclock, b admit.Budget) Grant {
	t.Helper()
	var g Grant
	require.NoError(t, Update(context.Background(), path, func(s *State) error {
		Tidy(s, c.read())
		g = Claim(s, "j", b, 0, c.read())
		return nil
	}))
	return g
}

func TestUpdateKeepsStateAcrossProcessesOfOneFile(t *testing.T) {
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

func TestUpdateIgnoresATornLastLine(t *testing.T) {
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

func TestUpdateRefusesADamagedOrOddFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("garbage\n"), 0o600))
	err := Update(context.Background(), bad, func(*State) error { return nil })
	assert.ErrorContains(t, err, "no readable state")

	link := filepath.Join(dir, "link.json")
	require.NoError(t, os.Symlink(filepath.Join(dir, "elsewhere"), link))
	err = Update(context.Background(), link, func(*State) error { return nil })
	assert.ErrorContains(t, err, "a symbolic link")
	assert.NoFileExists(t, filepath.Join(dir, "elsewhere"), "a dangling link creates nothing")
}

func TestUpdateReadsVersionOne(t *testing.T) {
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
func TestUpdateStartsOverWhenTheFileVanishes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st", "claims.json")
	c := newClock()
	b := budget(time.Hour, 5)
	claimOnce(t, path, c, b)
	runs := 0
	var g Grant
	require.NoError(t, Update(context.Background(), path, func(s *State) error {
		runs++
		if runs == 1 {
			require.NoError(t, os.RemoveAll(filepath.Dir(path))) // a cleanup, mid-claim
		}
		g = Claim(s, "j", b, 0, c.read())
		return nil
	}))
	assert.GreaterOrEqual(t, runs, 2, "the first run's write went to an unlinked file")
	assert.Equal(t, 2, g.Job.Attempts, "the claimer held the removed file: it carried the job over, and its grant is in the new file")
	assert.Equal(t, 3, claimOnce(t, path, c, b).Job.Attempts)
}

func TestMergeCountsEachGrantOnce(t *testing.T) {
	c := newClock()
	a := emptyState()
	b := budget(time.Minute, 9)
	Claim(a, "j", b, 0, c.read())
	c.pass(time.Second)
	Claim(a, "j", b, 0, c.read())
	copyA := clone(a)
	Claim(copyA, "j", b, 0, c.read()) // one more grant, in a copy only
	fresh := emptyState()
	Claim(fresh, "j", budget(30*time.Second, 9), 0, c.read()) // a claim against a fresh file

	m := Merge(Merge(Merge(nil, a), copyA), a) // a arrives twice
	assert.Equal(t, 3, m.Jobs["j"].Attempts)
	m = Merge(m, fresh)
	assert.Equal(t, 4, m.Jobs["j"].Attempts)
	assert.Equal(t, 30*time.Second, m.Jobs["j"].Deadline, "the stricter deadline")
	assert.Equal(t, a.Jobs["j"].Started, m.Jobs["j"].Started, "the timing of the copy that started first")
}

func TestUpdateDoesNotCreateAnEmptyState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st", "claims.json")
	require.NoError(t, Update(context.Background(), path, func(s *State) error { delete(s.Jobs, "x"); return nil }))
	assert.NoFileExists(t, path)
}

func TestUpdateHonoursCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Update(ctx, filepath.Join(t.TempDir(), "claims.json"), func(*State) error { return nil })
	assert.ErrorIs(t, err, context.Canceled)
}

func TestUpdateWaitIsInterruptible(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claims.json")
	c := newClock()
	claimOnce(t, path, c, budget(time.Hour, 5))
	holder, err := openState(path)
	require.NoError(t, err)
	defer holder.Close()
	require.NoError(t, lockFile(context.Background(), holder))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Update(ctx, path, func(*State) error { return nil }) }()
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)
}

// FuzzDecode: any state file's bytes decode to a state or an error, and a
// line the writer wrote always reads back as the state it holds.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":1,"jobs":{"j":{"attempts":1}}}`))
	f.Add(encodeLine([]byte(`{"version":2,"jobs":{"j":{"attempts":2,"deadline_ns":1000}}}`)))
	f.Add([]byte("0000000 {}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, end, err := decode(data)
		if err != nil {
			return
		}
		js, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		// What writeState leaves: the good lines, then the new one.
		next := append(append([]byte(nil), data[:end]...), encodeLine(js)...)
		again, end, err := decode(next)
		if err != nil || end != int64(len(next)) {
			t.Fatalf("a written line does not read back: %v (end %d)", err, end)
		}
		js2, _ := json.Marshal(again)
		if string(js) != string(js2) {
			t.Fatalf("round trip changed the state:\n%s\n%s", js, js2)
		}
	})
}
