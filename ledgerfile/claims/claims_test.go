package claims

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
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

func clone(s *State) *State {
	out := emptyState()
	for k, v := range s.Jobs {
		out.Jobs[k] = v
	}
	return out
}

// grant keeps one attempt of job granted at now, as a claim that the
// store admitted does (the decision is the store's, and tested there).
func grant(s *State, job string, b admit.Budget, now Reading) Job {
	return s.Take(job, s.Job(job, b, now), now)
}

func TestTidyForgetsADayAfterTheDeadline(t *testing.T) {
	c := newClock()
	s := emptyState()
	grant(s, "j", budget(time.Second, 1), c.read())
	c.pass(24*time.Hour + time.Second)
	Tidy(s, c.read())
	assert.Contains(t, s.Jobs, "j")
	c.pass(time.Millisecond)
	Tidy(s, c.read())
	assert.NotContains(t, s.Jobs, "j")
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

func TestMergeCountsEachGrantOnce(t *testing.T) {
	c := newClock()
	a := emptyState()
	b := budget(time.Minute, 9)
	grant(a, "j", b, c.read())
	c.pass(time.Second)
	grant(a, "j", b, c.read())
	copyA := clone(a)
	grant(copyA, "j", b, c.read()) // one more grant, in a copy only
	fresh := emptyState()
	grant(fresh, "j", budget(30*time.Second, 9), c.read()) // a claim against a fresh file

	m := Merge(Merge(Merge(nil, a), copyA), a) // a arrives twice
	assert.Equal(t, 3, m.Jobs["j"].Attempts)
	m = Merge(m, fresh)
	assert.Equal(t, 4, m.Jobs["j"].Attempts)
	assert.Equal(t, 30*time.Second, m.Jobs["j"].Deadline, "the stricter deadline")
	assert.Equal(t, a.Jobs["j"].Started, m.Jobs["j"].Started, "the timing of the copy that started first")
}

// grantOnce is one update of the file that keeps one grant of job "j".
func grantOnce(t *testing.T, path string, c *vclock, b admit.Budget) Job {
	t.Helper()
	var j Job
	require.NoError(t, Update(context.Background(), path, func(s *State) error {
		Tidy(s, c.read())
		j = grant(s, "j", b, c.read())
		return nil
	}))
	return j
}

// The file keeps every update, one line each, compacted now and then.
// (Decisions on the state are the store's: ledgerfile/store tests them
// through this file.)
func TestUpdateKeepsStateAcrossUpdatesOfOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st", "claims.json")
	c := newClock()
	b := budget(time.Hour, 300)
	for i := range 300 {
		require.Equal(t, i+1, grantOnce(t, path, c, b).Attempts)
	}
	s, err := ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, 300, s.Jobs["j"].Attempts)
	assert.Len(t, s.Jobs["j"].Grants, 300, "one id per grant")
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Less(t, st.Size(), int64(80<<10), "compacted, not grown by one line per update forever")
}

func TestUpdateIgnoresATornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claims.json")
	c := newClock()
	b := budget(time.Hour, 3)
	grantOnce(t, path, c, b)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`1234abcd {"version":2,"jobs":{"j":{"atte`) // a writer killed mid-line
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Equal(t, 2, grantOnce(t, path, c, b).Attempts, "the torn update never granted anything")
	require.Equal(t, 3, grantOnce(t, path, c, b).Attempts, "the update after the torn line is read back")
}

// Take keeps the deadline used so far and measures on from now.
func TestTakeKeepsTheDeadlineUsed(t *testing.T) {
	c := newClock()
	s := emptyState()
	b := budget(time.Minute, 5)
	j := grant(s, "j", b, c.read())
	assert.Equal(t, 1, j.Attempts)
	assert.Zero(t, j.Spent)
	c.pass(10 * time.Second)
	j = grant(s, "j", b, c.read())
	assert.Equal(t, 2, j.Attempts)
	assert.Equal(t, 10*time.Second, j.Spent)
	assert.Equal(t, time.Minute, j.Deadline, "fixed by the first claim")
	c.pass(5 * time.Second)
	assert.Equal(t, 15*time.Second, s.Jobs["j"].Used(c.read()))
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
	grantOnce(t, path, c, budget(time.Hour, 5))
	holder := ledgerfile.NewFileLock(path)
	require.NoError(t, holder.Lock(context.Background()))
	defer holder.Unlock()
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
