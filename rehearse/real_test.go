package rehearse

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/realtime"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// The same loop in real time against `seat serve`'s server on loopback,
// speaking OpenAI SSE through the real openai seat. Delays are small and
// bounds generous: what is asserted is the rule, not the machine's speed.

type liveServer struct {
	srv  *seatserver.Server
	addr net.Addr
}

func serveSeat(t *testing.T, ps ...seat.Plan) *liveServer {
	t.Helper()
	srv, err := seatserver.New(seatserver.Options{Planner: plans(ps), Format: seatserver.OpenAI})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Error("seat server did not stop within 5s")
		}
	})
	return &liveServer{srv: srv, addr: ln.Addr()}
}

func (s *liveServer) seat(t *testing.T, name string) SeatSpec {
	t.Helper()
	cfg := seat.Config{Name: name, Kind: "openai", BaseURL: seatserver.OpenAI.BaseURL(s.addr), Model: "gpt-4o-mini"}
	st, err := seat.New(cfg, func(string) string { return "" })
	require.NoError(t, err)
	return SeatSpec{Config: cfg, Seat: st}
}

// await polls the server's request records until cond holds or within passes.
func (s *liveServer) await(t *testing.T, within time.Duration, cond func([]seatserver.Record) bool) []seatserver.Record {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		rs := s.srv.Requests()
		if cond(rs) {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("server state not reached within %s: %+v", within, rs)
		}
		<-tick.C
	}
}

func livePolicy() Policy {
	p := DefaultPolicy()
	p.Breaker.FailureRate = 0
	p.Budget = admit.Budget{Deadline: 20 * time.Second, TokenCeiling: 100000, MaxAttempts: 3, MaxWait: 2 * time.Second}
	p.Retry.BaseDelay, p.Retry.MaxDelay = 100*time.Millisecond, 200*time.Millisecond
	p.Timeouts = Timeouts{Soft: 200 * time.Millisecond, Hard: 600 * time.Millisecond}
	return p
}

// syncRows is a row sink safe for the real-time driver's goroutines.
type syncRows struct {
	mu sync.Mutex
	r  rows
}

func (s *syncRows) sink(r *ledgerfile.Row) { s.mu.Lock(); s.r.sink(r); s.mu.Unlock() }

func TestRehearseLiveRetryAfterBackoffAndFallback(t *testing.T) {
	okFast := seat.Plan{TTFB: 10 * time.Millisecond, Wait: 30 * time.Millisecond, Elapsed: 120 * time.Millisecond, PromptTokens: 20, CompletionTokens: 12}
	primary := serveSeat(t,
		seat.Plan{Status: 429, ErrorCode: "rate_limit_exceeded", RetryAfter: 300 * time.Millisecond, HasRetryAfter: true, Elapsed: 10 * time.Millisecond},
		okFast,
		seat.Plan{Status: 503, Elapsed: 10 * time.Millisecond},
		seat.Plan{Hang: true, TTFB: 10 * time.Millisecond, Wait: time.Minute, PromptTokens: 20}, // headers, then nothing: the soft note is for no content yet
	)
	backup := serveSeat(t, okFast)

	var out syncRows
	var soft []string
	var softMu sync.Mutex
	l, err := New(Config{
		Policy: livePolicy(), Seats: []SeatSpec{primary.seat(t, "primary"), backup.seat(t, "backup")},
		Rand: seeded(7), Sink: out.sink, Run: 1, Jobs: 2, Prompt: "scratch", MaxTokens: 32,
	})
	require.NoError(t, err)
	res, err := l.RunReal(context.Background(), RealOptions{Jobs: 2, OnSoft: func(job, name string, el time.Duration) {
		softMu.Lock()
		soft = append(soft, job+" "+name)
		softMu.Unlock()
	}})
	require.NoError(t, err)
	assert.Equal(t, Ends{Succeeded: 2}, res.Ends)
	got := out.r

	// Job 1: 429 with Retry-After 300ms; the retry waits exactly that (not
	// jitter), measured between the 429's return and the next submit.
	j1 := got.byJob("r1-1")
	require.Len(t, j1, 2)
	assert.Equal(t, admit.RateLimited, j1[0].Outcome)
	assert.Equal(t, 300*time.Millisecond, j1[1].Delay)
	gap := j1[1].TS.Sub(j1[0].TS.Add(j1[0].Elapsed))
	assert.GreaterOrEqual(t, gap, 290*time.Millisecond)
	assert.Less(t, gap, realtime.By(300*time.Millisecond), "a ceiling only a hang reaches")
	assert.Equal(t, admit.OK, j1[1].Outcome)

	// Job 2: a fast 503 backs off with jitter (at most base_delay), then the
	// stream stalls past the 600ms hard timeout, and the retry goes to the
	// fallback seat.
	j2 := got.byJob("r1-2")
	require.Len(t, j2, 3)
	assert.Equal(t, admit.ServerError, j2[0].Outcome)
	assert.LessOrEqual(t, j2[1].Delay, 100*time.Millisecond)
	gap = j2[1].TS.Sub(j2[0].TS.Add(j2[0].Elapsed))
	assert.GreaterOrEqual(t, gap, j2[1].Delay-5*time.Millisecond)
	assert.Less(t, gap, realtime.By(j2[1].Delay))
	assert.Equal(t, admit.Timeout, j2[1].Outcome)
	assert.Less(t, j2[1].Elapsed, realtime.By(600*time.Millisecond), "cut by the hard timeout")
	// The deadline is set just before the seat's stopwatch starts, so the
	// measured elapsed may fall a hair short of the 600ms.
	assert.GreaterOrEqual(t, j2[1].Elapsed, 590*time.Millisecond)
	assert.Equal(t, "backup", j2[2].Seat)
	assert.True(t, j2[2].Fallback)
	assert.Equal(t, ledgerfile.JobSucceeded, j2[2].JobEnd)

	// The server saw the timed-out stream cancelled, and every attempt
	// carried its job id as the Idempotency-Key.
	rs := primary.await(t, 3*time.Second, func(rs []seatserver.Record) bool {
		return len(rs) == 4 && rs[3].State == seatserver.StateCancelled
	})
	var keys []string
	for _, r := range rs {
		keys = append(keys, r.IdempotencyKey)
	}
	assert.Equal(t, []string{"r1-1", "r1-1", "r1-2", "r1-2"}, keys)
	assert.Equal(t, "r1-2", backup.srv.Requests()[0].IdempotencyKey)

	softMu.Lock()
	defer softMu.Unlock()
	assert.Equal(t, []string{"r1-2 primary"}, soft, "the stalled attempt passed the 200ms soft timeout")
}

func TestRehearseLiveCtrlC(t *testing.T) {
	// A seat that never answers; Ctrl-C cancels the attempt, the row says
	// cancelled, and the server sees the client leave. The run is
	// interrupted even when the cancelled job was its only one.
	for _, jobs := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d jobs", jobs), func(t *testing.T) {
			live := serveSeat(t, seat.Plan{Hang: true})
			p := livePolicy()
			p.Budget.MaxWait = 10 * time.Second
			p.Timeouts.Hard = 10 * time.Second
			var out syncRows
			l, err := New(Config{Policy: p, Seats: []SeatSpec{live.seat(t, "hang")}, Rand: seeded(1), Sink: out.sink, Run: 4, Jobs: jobs, Prompt: "x"})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan Result, 1)
			go func() {
				res, err := l.RunReal(ctx, RealOptions{Jobs: jobs})
				assert.NoError(t, err)
				done <- res
			}()
			live.await(t, 3*time.Second, func(rs []seatserver.Record) bool {
				return len(rs) == 1 && rs[0].State == seatserver.StateInFlight
			})
			cancel()
			var res Result
			select {
			case res = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the run did not stop within 5s of Ctrl-C")
			}
			assert.True(t, res.Interrupted)
			assert.Equal(t, Ends{Cancelled: 1}, res.Ends)
			require.Len(t, out.r, 1)
			assert.Equal(t, admit.Cancelled, out.r[0].Outcome)
			assert.Equal(t, ledgerfile.JobCancelled, out.r[0].JobEnd)
			assert.Less(t, out.r[0].Elapsed, 5*time.Second)
			rs := live.await(t, 3*time.Second, func(rs []seatserver.Record) bool {
				return len(rs) == 1 && rs[0].State == seatserver.StateCancelled
			})
			assert.True(t, rs[0].Cancelled)
			assert.Equal(t, "r4-1", rs[0].IdempotencyKey)
		})
	}
}
