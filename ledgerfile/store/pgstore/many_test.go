package pgstore

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore/pgtest"
	"github.com/retrygate/retrygate/rehearse/realtime"
)

// A claimer process: the test binary run again with RETRYGATE_CLAIMER set.
func TestMain(m *testing.M) {
	switch os.Getenv("RETRYGATE_CLAIMER") {
	case "cap":
		os.Exit(claimerCap())
	case "churn":
		os.Exit(claimerChurn())
	}
	os.Exit(m.Run())
}

const (
	claimProcs      = 8
	claimGoroutines = 8
	claimCap        = 5
)

func capBudget() admit.Budget {
	return admit.Budget{Deadline: time.Hour, TokenCeiling: 1 << 40, MaxAttempts: claimCap, MaxWait: time.Minute}
}

// claimerCap: 8 goroutines each claim every job once, in the same order
// as every other process; prints "job granted" per job.
func claimerCap() int {
	ctx := context.Background()
	s, err := Open(ctx, os.Getenv("RETRYGATE_CLAIMER_URL"), Options{MaxConns: claimGoroutines})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer s.Close()
	jobs, _ := strconv.Atoi(os.Getenv("RETRYGATE_CLAIMER_JOBS"))
	granted := make([]atomic.Int64, jobs)
	var wg sync.WaitGroup
	var failed atomic.Value
	for g := 0; g < claimGoroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < jobs; j++ {
				gr, err := claims(s).Claim(ctx, store.Request{Job: fmt.Sprintf("job-%d", j), Budget: capBudget()})
				if err != nil {
					failed.Store(err)
					return
				}
				if gr.Decision.Admit {
					granted[j].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	for j := range granted {
		fmt.Printf("job-%d %d\n", j, granted[j].Load())
	}
	return 0
}

func startClaimers(t *testing.T, mode, u string, n int, env ...string) []*exec.Cmd {
	t.Helper()
	var cmds []*exec.Cmd
	for i := 0; i < n; i++ {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), append([]string{"RETRYGATE_CLAIMER=" + mode, "RETRYGATE_CLAIMER_URL=" + u}, env...)...)
		c.Stderr = os.Stderr
		cmds = append(cmds, c)
	}
	return cmds
}

// Many machines: 8 processes × 8 goroutines claim each of 100 jobs with a
// cap of 5 attempts. Every job grants exactly 5.
func TestManyMachinesClaimExactlyTheCap(t *testing.T) {
	s, u := open(t, Options{})
	const jobs = 100
	cmds := startClaimers(t, "cap", u, claimProcs, "RETRYGATE_CLAIMER_JOBS="+strconv.Itoa(jobs))
	outs := make([]*bufio.Scanner, len(cmds))
	for i, c := range cmds {
		out, err := c.StdoutPipe()
		require.NoError(t, err)
		outs[i] = bufio.NewScanner(out)
		require.NoError(t, c.Start())
	}
	granted := map[string]int{}
	for i, c := range cmds {
		for outs[i].Scan() {
			f := strings.Fields(outs[i].Text())
			n, _ := strconv.Atoi(f[1])
			granted[f[0]] += n
		}
		require.NoError(t, c.Wait())
	}
	require.Len(t, granted, jobs)
	for j := 0; j < jobs; j++ {
		id := fmt.Sprintf("job-%d", j)
		assert.Equal(t, claimCap, granted[id], id)
		assert.Equal(t, claimCap, claimBook(t, s, id).Job.Attempts, id)
	}
}

// churnBudget reserves 100 tokens and $1 per claim; 10 attempts.
func churnBudget() admit.Budget {
	return admit.Budget{Deadline: time.Hour, TokenCeiling: 1 << 40, MaxAttempts: 10, MaxWait: time.Minute, MaxSpendUSD: 1e6}
}

// claimerChurn claims and settles attempts of a few jobs as fast as it
// can until it is killed: half the claims are settled by their row, the
// rest are left to expire.
func claimerChurn() int {
	ctx := context.Background()
	s, err := Open(ctx, os.Getenv("RETRYGATE_CLAIMER_URL"), Options{MaxConns: 4})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				job := fmt.Sprintf("job-%d", rand.IntN(5))
				gr, err := claims(s).Claim(ctx, store.Request{Job: job, Budget: churnBudget(), Hard: time.Second,
					Next: admit.Next{Tokens: 100, USD: 1}})
				fmt.Println("claimed") // the test counts these to know the claimer runs
				if err != nil || !gr.Decision.Admit {
					continue
				}
				if i%2 == 0 {
					_ = s.Append(ctx, ledgerfile.Row{Job: job, Attempt: gr.Attempt, Tokens: 7, CostUSD: 0.25, HasCost: true, Outcome: admit.OK})
				}
			}
		}()
	}
	wg.Wait()
	return 0
}

// Claimers are kill -9'd mid-run, mid-transaction. No attempt is lost
// and none counted twice: every job's books number each claimed attempt
// once, as recorded (settled by its row) or held, and once the dead
// claimers' attempts time out, each counts once: as its row says, or as
// its reservation.
func TestKilledClaimersLeakNothing(t *testing.T) {
	s, u := open(t, Options{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 24))
	for round := 0; round < 3; round++ {
		cmds := startClaimers(t, "churn", u, 4)
		var calls atomic.Int64
		var readers sync.WaitGroup
		for _, c := range cmds {
			out, err := c.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, c.Start())
			readers.Add(1)
			go func() {
				defer readers.Done()
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					calls.Add(1)
				}
			}()
		}
		// Kill once the claimers are running, after a seeded number of
		// Claim calls: an event, not a sleep (on a loaded machine a
		// process may not have started by then).
		want := 20 + rng.Int64N(200)
		deadline := time.Now().Add(realtime.By(30 * time.Second))
		for calls.Load() < want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // a poll of the claimers' count
		}
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGKILL)
		}
		readers.Wait()
		for _, c := range cmds {
			_ = c.Wait()
		}
		require.GreaterOrEqual(t, calls.Load(), want, "round %d: the claimers never ran", round)
		for j := 0; j < 5; j++ {
			checkBook(t, s, fmt.Sprintf("job-%d", j))
		}
	}
	// Past every hard timeout, each held attempt is spent: as its row says
	// when it has one (settled now), else as its reservation.
	later := time.Now().Add(time.Hour)
	var claimed int
	for j := 0; j < 5; j++ {
		job := fmt.Sprintf("job-%d", j)
		before := claimBook(t, s, job)
		rows, err := s.ReadJob(ctx, job)
		require.NoError(t, err)
		g, err := claims(s).Claim(ctx, store.Request{Job: job, Budget: churnBudget(), Now: later})
		require.NoError(t, err)
		assert.Zero(t, g.Held, job)
		lost := before.Job.Attempts - len(rows)
		assert.Equal(t, int64(7*len(rows)+100*lost), g.Spent.Tokens, "%s: every attempt counted once", job)
		assert.Equal(t, before.Job.Attempts, g.Spent.Attempts, job)
		after := checkBook(t, s, job)
		assert.Len(t, after.Job.Sent, len(rows), "%s: every row settled its attempt", job)
		claimed += before.Job.Attempts
	}
	assert.Greater(t, claimed, 10, "the claimers made progress before they were killed")
}

// claimBook is the job's claim as the database keeps it.
func claimBook(t *testing.T, s *Store, job string) store.ClaimBook {
	t.Helper()
	var data []byte
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT book FROM retrygate_books WHERE key = $1`,
		store.ClaimKey(job)).Scan(&data))
	c, err := store.ReadClaim(data)
	require.NoError(t, err)
	return c
}

// checkBook: the job's claimed attempts are numbered 1..n, each once, as
// recorded or held, and no held attempt has a row the books took.
func checkBook(t *testing.T, s *Store, job string) store.ClaimBook {
	t.Helper()
	c := claimBook(t, s, job)
	assert.Equal(t, c.Job.Attempts, len(c.Job.Sent)+len(c.Held), "%s: attempts", job)
	seen := map[int]bool{}
	for _, h := range c.Held {
		assert.False(t, seen[h.Attempt], "%s: attempt %d held twice", job, h.Attempt)
		seen[h.Attempt] = true
		assert.True(t, h.Attempt >= 1 && h.Attempt <= c.Job.Attempts, "%s: attempt %d numbered past %d", job, h.Attempt, c.Job.Attempts)
	}
	return c
}

// The server restarts mid-run: every row whose Append returned nil is in
// the table afterwards, and the writers carry on once it is back.
func TestServerRestartKeepsAcknowledgedRows(t *testing.T) {
	srv := pgtest.NewServer(t)
	ctx := context.Background()
	_, err := Init(ctx, srv.URL)
	require.NoError(t, err)
	s, err := Open(ctx, srv.URL, Options{RetryFor: 30 * time.Second})
	require.NoError(t, err)
	defer s.Close()

	var mu sync.Mutex
	acked := map[string]bool{}
	var failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				job := fmt.Sprintf("w%d-%d", w, i)
				if err := s.Append(ctx, ledgerfile.Row{Job: job, Attempt: 1, Tokens: int64(i)}); err != nil {
					failures.Add(1) // outcome unknown: the commit was cut off
					continue
				}
				mu.Lock()
				acked[job] = true
				mu.Unlock()
			}
		}()
	}
	// The writers are writing before the restart, and write again after
	// it: awaited as acknowledged rows, not slept for.
	nAcked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	awaitAcked := func(n int, when string) {
		deadline := time.Now().Add(realtime.By(30 * time.Second))
		for nAcked() < n {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("%s: %d rows acknowledged, want %d", when, nAcked(), n)
			}
			time.Sleep(time.Millisecond) // a poll of the writers' count
		}
	}
	awaitAcked(20, "before the restart")
	srv.Restart(300 * time.Millisecond) // the server's down time, not a test clock
	awaitAcked(nAcked()+20, "after the restart: the writers carry on")
	close(stop)
	wg.Wait()

	rows, err := s.ReadJob(ctx, "")
	require.NoError(t, err)
	have := map[string]bool{}
	for _, r := range rows {
		have[r.Job] = true
	}
	mu.Lock()
	defer mu.Unlock()
	missing := 0
	for job := range acked {
		if !have[job] {
			missing++
		}
	}
	assert.Zero(t, missing, "acknowledged rows lost")
	assert.GreaterOrEqual(t, len(acked), 40)
	t.Logf("%d rows acknowledged, %d appends failed with the outcome unknown", len(acked), failures.Load())
}
