package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// A holder process: the test binary run again with RETRYGATE_BOOKS_HOLDER
// set adds 1 to a counter record that many times, each a Book of its own.
func TestMain(m *testing.M) {
	if path := os.Getenv("RETRYGATE_BOOKS_FILE"); path != "" {
		n, _ := strconv.Atoi(os.Getenv("RETRYGATE_BOOKS_HOLDER"))
		if err := increment(&FileBooks{Path: path}, "n", n); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// increment adds 1 to key's counter n times, as a proxy's requests update
// one job's books: read, decide, replace.
func increment(b Books, key string, n int) error {
	for range n {
		err := b.Book(context.Background(), key, func(old []byte, now time.Time) (Record, []ledgerfile.Row, error) {
			v := 0
			if old != nil {
				if err := json.Unmarshal(old, &v); err != nil {
					return Record{}, nil, err
				}
			}
			data, err := json.Marshal(v + 1)
			return Record{Data: data, Due: Never}, nil, err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func counter(t *testing.T, path, key string) int {
	t.Helper()
	books, err := ReadFileBooks(path)
	require.NoError(t, err)
	var v int
	require.NoError(t, json.Unmarshal(books[key].Data, &v))
	return v
}

// Holders of one key, each with its own descriptors as separate processes
// have, serialize: no update is lost.
func TestFileBookSerializesConcurrentHolders(t *testing.T) {
	const holders, each = 8, 25
	path := filepath.Join(t.TempDir(), "books")
	var wg sync.WaitGroup
	errs := make(chan error, holders+1)
	shared := &FileBooks{Path: path} // and goroutines sharing one FileBooks
	for i := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := shared
			if i%2 == 0 {
				b = &FileBooks{Path: path}
			}
			errs <- increment(b, "n", each)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, holders*each, counter(t, path, "n"))
}

func TestFileBookSerializesHolderProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	const procs, each = 4, 25
	path := filepath.Join(t.TempDir(), "books")
	var cmds []*exec.Cmd
	for range procs {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), "RETRYGATE_BOOKS_FILE="+path, "RETRYGATE_BOOKS_HOLDER="+strconv.Itoa(each))
		c.Stderr = os.Stderr
		require.NoError(t, c.Start())
		cmds = append(cmds, c)
	}
	require.NoError(t, increment(&FileBooks{Path: path}, "n", each)) // and this process, meanwhile
	for _, c := range cmds {
		require.NoError(t, c.Wait())
	}
	assert.Equal(t, (procs+1)*each, counter(t, path, "n"))
}

func TestFileBooksRefuseADamagedOrOddFile(t *testing.T) {
	dir := t.TempDir()
	keep := func(path string) error {
		return (&FileBooks{Path: path}).Book(context.Background(), "k", func([]byte, time.Time) (Record, []ledgerfile.Row, error) {
			return Record{Data: []byte(`1`)}, nil, nil
		})
	}
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("garbage\n"), 0o600))
	assert.ErrorContains(t, keep(bad), `failed to read state "`+bad+`": no readable state in the file (delete it to start afresh)`)

	newer := filepath.Join(dir, "newer.json")
	require.NoError(t, os.WriteFile(newer, encodeLine([]byte(`{"version":99}`)), 0o600))
	assert.ErrorContains(t, keep(newer), "version 99 is newer than this retrygate reads (3): upgrade retrygate")

	link := filepath.Join(dir, "link.json")
	require.NoError(t, os.Symlink(filepath.Join(dir, "elsewhere"), link))
	assert.ErrorContains(t, keep(link), "not a regular file (a symbolic link)")
	assert.NoFileExists(t, filepath.Join(dir, "elsewhere"), "a dangling link creates nothing")
}

func TestFileBooksCreateNothingToKeep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st", "books")
	require.NoError(t, (&FileBooks{Path: path}).Book(context.Background(), "k", func(old []byte, _ time.Time) (Record, []ledgerfile.Row, error) {
		assert.Nil(t, old)
		return Record{}, nil, nil
	}))
	assert.NoDirExists(t, filepath.Dir(path))
}

func TestFileBooksHonourCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := increment2(ctx, &FileBooks{Path: filepath.Join(t.TempDir(), "books")})
	assert.ErrorIs(t, err, context.Canceled)
}

func increment2(ctx context.Context, b *FileBooks) error {
	return b.Book(ctx, "k", func([]byte, time.Time) (Record, []ledgerfile.Row, error) {
		return Record{Data: []byte(`1`)}, nil, nil
	})
}

// A holder waiting for the lock stops at Ctrl-C (ctx).
func TestFileBooksWaitIsInterruptible(t *testing.T) {
	path := filepath.Join(t.TempDir(), "books")
	require.NoError(t, increment2(context.Background(), &FileBooks{Path: path}))
	holder := flock.New(path, flock.SetFlag(stateFlags))
	require.NoError(t, holder.Lock())
	defer holder.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- increment2(ctx, &FileBooks{Path: path}) }()
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)
}

// Records are kept as given: JSON as it is (the file stays readable),
// anything else as bytes; nil Data forgets the key.
func TestFileBooksKeepRecordsAsGiven(t *testing.T) {
	path := filepath.Join(t.TempDir(), "books")
	b := &FileBooks{Path: path}
	put := func(key string, data []byte) {
		require.NoError(t, b.Book(context.Background(), key, func([]byte, time.Time) (Record, []ledgerfile.Row, error) {
			return Record{Data: data, Due: Never}, nil, nil
		}))
	}
	for _, d := range [][]byte{[]byte(`{"a":1}`), []byte(`{ "a": 1 }`), []byte("\x00\xffbinary"), []byte(`"<b>"`)} {
		put("k", d)
		books, err := ReadFileBooks(path)
		require.NoError(t, err)
		assert.Equal(t, d, books["k"].Data)
	}
	put("j", []byte(`{"a":1}`))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"json":{"a":1}`)
	put("j", nil)
	books, err := ReadFileBooks(path)
	require.NoError(t, err)
	assert.NotContains(t, books, "j")
}

// BookShared replaces both records in one write.
func TestFileBookSharedKeepsBoth(t *testing.T) {
	b := &FileBooks{Path: filepath.Join(t.TempDir(), "books")}
	for i := 1; i <= 2; i++ {
		require.NoError(t, b.BookShared(context.Background(), "job", "budget", func(old, sharedOld []byte, _ time.Time) (Record, []byte, []ledgerfile.Row, error) {
			if i == 1 {
				assert.Nil(t, old)
				assert.Nil(t, sharedOld)
			} else {
				assert.Equal(t, `1`, string(old))
				assert.Equal(t, `"s1"`, string(sharedOld))
			}
			return Record{Data: []byte(strconv.Itoa(i)), Due: Never}, []byte(fmt.Sprintf(`"s%d"`, i)), nil, nil
		}))
	}
	books, err := ReadFileBooks(b.Path)
	require.NoError(t, err)
	assert.Equal(t, "2", string(books["job"].Data))
	assert.Equal(t, `"s2"`, string(books["budget"].Data))
	assert.Equal(t, Never, books["budget"].Due, "the shared record is never due")
}

// Due lists the keys whose time has come on the file's clock, soonest
// first; a record past its Expires is gone.
func TestFileBooksDue(t *testing.T) {
	c := newClock()
	b := &FileBooks{Path: filepath.Join(t.TempDir(), "books"), Clock: c.read}
	ctx := context.Background()
	keys, err := b.Due(ctx, 10)
	require.NoError(t, err)
	assert.Empty(t, keys, "no file: nothing due")
	now, _ := c.read()
	for _, r := range []struct {
		key      string
		due, exp time.Duration
	}{{"late", 3 * time.Second, 0}, {"soon", time.Second, 0}, {"never", 0, 0}, {"gone", time.Second, 2 * time.Second}} {
		rec := Record{Data: []byte(`1`), Due: now.Wall.Add(r.due)}
		if r.due == 0 {
			rec.Due = Never
		}
		if r.exp > 0 {
			rec.Expires = now.Wall.Add(r.exp)
		}
		require.NoError(t, b.Book(ctx, r.key, func([]byte, time.Time) (Record, []ledgerfile.Row, error) { return rec, nil, nil }))
	}
	keys, err = b.Due(ctx, 10)
	require.NoError(t, err)
	assert.Empty(t, keys)
	c.pass(time.Second)
	keys, err = b.Due(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"gone", "soon"}, keys)
	c.setWall(-time.Hour) // a wall clock set back changes nothing
	c.pass(2 * time.Second)
	keys, err = b.Due(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"soon", "late"}, keys, "gone has expired")
	keys, err = b.Due(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"soon"}, keys)
	require.NoError(t, increment2(ctx, b))
	books, err := ReadFileBooks(b.Path)
	require.NoError(t, err)
	assert.NotContains(t, books, "gone", "forgotten at the next update past its Expires")
}

// The file's clock: the boot clock while the boot is the same, else the
// wall clock, and never back.
func TestFileClockNeverGoesBack(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var c fileClock
	assert.Equal(t, t0, c.at(Reading{Wall: t0, Boot: time.Hour, BootID: "a"}), "a new file starts at the wall clock")
	assert.Equal(t, t0.Add(time.Second), c.at(Reading{Wall: t0.Add(-time.Hour), Boot: time.Hour + time.Second, BootID: "a"}))
	assert.Equal(t, t0.Add(2*time.Second), c.at(Reading{Wall: t0.Add(25 * time.Hour), Boot: time.Hour + 2*time.Second, BootID: "a"}))
	assert.Equal(t, t0.Add(2*time.Second), c.at(Reading{Wall: t0, Boot: time.Second, BootID: "b"}), "a reboot with the wall clock back: no time passed")
	assert.Equal(t, t0.Add(5*time.Second), c.at(Reading{Wall: t0.Add(3 * time.Second), Boot: 0}), "no boot clock: the wall clock")
}

// rows are what a proxy's Book hands the store with its records.
func rows(job string, n int) []ledgerfile.Row {
	var rs []ledgerfile.Row
	for i := 1; i <= n; i++ {
		rs = append(rs, ledgerfile.Row{TS: time.Date(2026, 11, 30, 12, 0, i, 0, time.UTC), Job: job, Attempt: i,
			Seat: "s", Wait: time.Second, Elapsed: 2 * time.Second, Tokens: 10, Outcome: admit.OK, Decision: "admit"})
	}
	return rs
}

// A Book's rows reach the log once, with its records: kept in the state
// first (one write), then appended under the log's lock unless a holder
// already did. A holder killed between the two leaves them for the next.
func TestFileBookRowsReachTheLogOnce(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "rehearsal.log")
	w := ledgerfile.NewWriter(logPath, false)
	defer w.Close()
	b := &FileBooks{Path: filepath.Join(dir, "books"), Log: w}
	ctx := context.Background()
	book := func(key string, rs []ledgerfile.Row) error {
		return b.Book(ctx, key, func([]byte, time.Time) (Record, []ledgerfile.Row, error) {
			return Record{Data: []byte(`1`), Due: Never}, rs, nil
		})
	}
	require.NoError(t, book("a", rows("a", 2)))
	require.NoError(t, book("b", nil))
	got, _, err := ledgerfile.ReadFile(logPath)
	require.NoError(t, err)
	require.Len(t, got, 2)

	// Kept and not appended (the holder died): the next holder appends them.
	lost := rows("c", 1)
	require.NoError(t, b.update(ctx, func(s *bookState, _ time.Time) error {
		p, err := b.keep(lost)
		s.Outbox = append(s.Outbox, *p)
		return err
	}))
	// Kept and appended, the holder dying before the next update: not again.
	done := rows("d", 1)
	require.NoError(t, b.update(ctx, func(s *bookState, _ time.Time) error {
		p, err := b.keep(done)
		s.Outbox = append(s.Outbox, *p)
		return err
	}))
	require.NoError(t, w.Append(done...))
	require.NoError(t, book("e", nil))
	require.NoError(t, book("e", nil))
	got, _, err = ledgerfile.ReadFile(logPath) // strict: a (job, attempt) twice fails here
	require.NoError(t, err)
	var jobs []string
	for _, r := range got {
		jobs = append(jobs, fmt.Sprintf("%s%d", r.Job, r.Attempt))
	}
	assert.Equal(t, []string{"a1", "a2", "c1", "d1"}, jobs, "c by the next update, d once")
	data, err := os.ReadFile(b.Path)
	require.NoError(t, err)
	s, _, err := decode(data)
	require.NoError(t, err)
	assert.Empty(t, s.Outbox, "delivered rows leave the state")

	// Books with no log refuse rows rather than drop them.
	err = (&FileBooks{Path: b.Path}).Book(ctx, "f", func([]byte, time.Time) (Record, []ledgerfile.Row, error) {
		return Record{Data: []byte(`1`)}, rows("f", 1), nil
	})
	assert.ErrorContains(t, err, "keep no log")
	books, err := ReadFileBooks(b.Path)
	require.NoError(t, err)
	assert.NotContains(t, books, "f", "neither the record nor the rows")
}

// FuzzDecode: any state file's bytes decode to a state or an error, and a
// line the writer wrote always reads back as the state it holds.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":1,"jobs":{"j":{"attempts":1}}}`))
	f.Add(encodeLine([]byte(`{"version":2,"jobs":{"j":{"attempts":2,"deadline_ns":1000}}}`)))
	f.Add(encodeLine([]byte(`{"version":3,"books":{"k":{"json":{"a":1},"due":"2026-01-01T00:00:00Z","rev":2}}}`)))
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
