package proxy

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// livePlans is a seat server's planner a property run changes between
// its cases: the i-th call of a case gets the case's i-th answer (the
// last one once they run out), whichever request it is.
type livePlans struct {
	mu sync.Mutex
	ps []seat.Plan
	n  int
}

func (l *livePlans) PlanFor(int) seat.Plan {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.ps[min(l.n, len(l.ps)-1)]
	l.n++
	return p
}

func (l *livePlans) set(ps []seat.Plan) {
	l.mu.Lock()
	l.ps, l.n = ps, 0
	l.mu.Unlock()
}

// drawAnswer draws one upstream answer: a success, a fast or slow 5xx, a 429
// with a Retry-After inside or past the deadline, a 401, or a stream the
// hard timeout cuts.
func drawAnswer(t *rapid.T, hard time.Duration) seat.Plan {
	switch rapid.IntRange(0, 6).Draw(t, "kind") {
	case 0, 1:
		return seat.Plan{Wait: 2 * ms, Elapsed: 4 * ms, PromptTokens: 10, CompletionTokens: rapid.Int64Range(1, 60).Draw(t, "completion")}
	case 2:
		return seat.Plan{Status: 500, Elapsed: 2 * ms}
	case 3:
		return seat.Plan{Status: 500, Elapsed: 30 * ms} // past slow_5xx_after: ambiguous
	case 4:
		// The proxy waits a Retry-After it honours, in real time: 1 s
		// is the shortest a header says; 60 s is past the deadline.
		ra := time.Duration(rapid.SampledFrom([]int{0, 0, 1, 60}).Draw(t, "retry_after")) * time.Second
		return seat.Plan{Status: 429, Elapsed: 2 * ms, RetryAfter: ra, HasRetryAfter: true}
	case 5:
		return seat.Plan{Status: 401, Elapsed: 2 * ms}
	}
	return seat.Plan{TTFB: ms, Wait: 2 * ms, Elapsed: hard + time.Second, CompletionTokens: 20}
}

// Whatever the policy, the answers and how a job's requests overlap, a
// proxy's log replays under the policy that wrote it (the replay `check
// --policy` runs) with no decision changed, each job's rows are its
// attempts 1, 2, … in order, each once, and no job sends more attempts
// than its cap, however many requests its client sends: random jobs, each sending waves
// of concurrent requests, against a seat server giving random answers,
// through an in-process proxy writing a file log.
func TestPropertyProxyLogReplaysUnchanged(t *testing.T) {
	live := &livePlans{ps: []seat.Plan{okPlan}}
	srv, err := seatserver.New(seatserver.Options{Planner: live, Format: seatserver.OpenAI, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	base := seatserver.OpenAI.BaseURL(ln.Addr())
	dir := t.TempDir()
	k := 0
	// Each case runs real requests: 30 cases unless -rapid.checks says.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		_ = f.Value.Set("30")
		t.Cleanup(func() { _ = f.Value.Set(f.DefValue) })
	}

	rapid.Check(t, func(rt *rapid.T) {
		pol := testPolicy()
		pol.Timeouts.Hard = 50 * ms
		pol.Budget = admit.Budget{
			Deadline:     rapid.SampledFrom([]time.Duration{45 * time.Second, 2 * time.Second}).Draw(rt, "deadline"),
			TokenCeiling: rapid.SampledFrom([]int64{60, 100_000}).Draw(rt, "token_ceiling"),
			MaxAttempts:  rapid.IntRange(1, 4).Draw(rt, "max_attempts"),
			MaxWait:      30 * time.Second, // past any timer a loaded machine makes late (a wait over it is the cap's cut on replay)
		}
		pol.Retry = admit.RetryPolicy{BaseDelay: ms, MaxDelay: ms, SlowServerAfter: 20 * ms,
			HonorRetryAfter: rapid.Bool().Draw(rt, "honor_retry_after"), TimeoutsRetried: rapid.IntRange(0, 1).Draw(rt, "timeouts_retried")}
		live.set(rapid.SliceOfN(rapid.Custom(func(t *rapid.T) seat.Plan { return drawAnswer(t, pol.Timeouts.Hard) }), 1, 12).Draw(rt, "answers"))
		// waves[j] are job j's waves: each wave's requests go at once,
		// the next wave once they are answered.
		waves := rapid.SliceOfN(rapid.SliceOfN(rapid.IntRange(1, 3), 1, 3), 1, 3).Draw(rt, "waves")

		k++
		path := filepath.Join(dir, fmt.Sprintf("p%d.log", k))
		lg := store.OpenFile(path, false)
		px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) {
			o.Sink = func(rs []ledgerfile.Row) error { return lg.Append(context.Background(), rs...) }
		})
		sent := map[string]int{}
		var wg sync.WaitGroup
		for j, ws := range waves {
			job := fmt.Sprintf("job-%d", j)
			for _, n := range ws {
				sent[job] += n
			}
			wg.Go(func() {
				for _, n := range ws {
					var wave sync.WaitGroup
					for range n {
						wave.Go(func() { post(t, px.url+"/v1/chat/completions", streamBody, "X-Retrygate-Job", job) })
					}
					wave.Wait()
				}
			})
		}
		wg.Wait()
		px.stop() // Close: every row is in the log
		_ = lg.Close()

		f, err := os.Open(path)
		if err != nil {
			rt.Fatal(err)
		}
		defer f.Close()
		var rows []ledgerfile.Row
		if _, _, err := summary.Scan(f, path, false, func(r *ledgerfile.Row) { rows = append(rows, *r) }); err != nil {
			rt.Fatal(err)
		}
		if ch := changedDecisions(pol, rows); len(ch) > 0 {
			rt.Fatalf("decisions that change: %d of %d\n%s\nthe log:\n%s", len(ch), len(rows), strings.Join(ch, "\n"), rowsText(rows))
		}
		next := map[string]int{}
		for _, r := range rows {
			next[r.Job]++
			if r.Attempt != next[r.Job] {
				rt.Fatalf("job %s: attempt %d where %d was due (rows out of attempt order or twice)\n%s", r.Job, r.Attempt, next[r.Job], rowsText(rows))
			}
		}
		upstream := map[string]int{}
		for _, r := range rows {
			if !r.Unsent {
				upstream[r.Job]++
			}
		}
		for job, n := range sent {
			// At least a row a request (its last carries the job's end),
			// at most the attempts the cap allows sent, and one refusal
			// a request besides.
			if next[job] < n || upstream[job] > pol.Budget.MaxAttempts || next[job] > pol.Budget.MaxAttempts+n {
				rt.Fatalf("job %s: %d requests, %d rows, %d sent\n%s", job, n, next[job], upstream[job], rowsText(rows))
			}
		}
	})
}
