package seat

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"retrygate/admit"
)

// errWaitCap is the cancel cause when no content came within the wait cap.
var errWaitCap = errors.New("no content within the wait cap")

// guard runs one attempt's clocks: the wait cap (cancel unless the answer
// has begun) and the soft timeout (tell the caller, cancel nothing). The
// hard timeout is the context's own deadline.
type guard struct {
	start  time.Time
	cancel context.CancelCauseFunc
	state  atomic.Int32 // 0 waiting, 1 answered, 2 capped

	mu      sync.Mutex // held while OnSoft runs, so stop waits for it
	stopped bool
	timers  []*time.Timer
}

const (
	waiting int32 = iota
	answered
	capped
)

func startGuard(start time.Time, req Request, cancel context.CancelCauseFunc) *guard {
	g := &guard{start: start, cancel: cancel}
	if req.WaitCap > 0 {
		g.timers = append(g.timers, time.AfterFunc(req.WaitCap-time.Since(start), func() {
			if g.state.CompareAndSwap(waiting, capped) {
				g.cancel(errWaitCap)
			}
		}))
	}
	if req.SoftTimeout > 0 && req.OnSoft != nil {
		g.timers = append(g.timers, time.AfterFunc(req.SoftTimeout-time.Since(start), func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if !g.stopped {
				req.OnSoft(time.Since(g.start))
			}
		}))
	}
	return g
}

// answer marks the first byte of the answer (content, or an error the
// server chose to send): from here on the wait cap cannot fire. It
// reports false when the cap has already fired.
func (g *guard) answer() bool {
	return g.state.CompareAndSwap(waiting, answered) || g.state.Load() == answered
}

// stop disarms the clocks; once it returns OnSoft is not running and will
// not run.
func (g *guard) stop() {
	for _, t := range g.timers {
		t.Stop()
	}
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

// cancelled says why ctx (derived from parent) ended, or "" when it has
// not: the wait cap, the hard timeout (the parent's deadline), or the
// operator cancelling the run.
func cancelled(parent, ctx context.Context) (admit.Outcome, string) {
	if ctx.Err() == nil {
		return "", ""
	}
	if errors.Is(context.Cause(ctx), errWaitCap) {
		return admit.WaitCap, "no content within the wait cap"
	}
	if errors.Is(parent.Err(), context.DeadlineExceeded) {
		return admit.Timeout, "hard timeout"
	}
	return admit.Cancelled, "cancelled"
}
