package seat

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// errWaitCap is the cancel cause when no content came within the wait cap.
var errWaitCap = errors.New("no content within the wait cap")

// guard runs one attempt's clocks: the wait cap (cancel unless the answer
// has begun), the soft timeout (tell the caller, cancel nothing) and the
// drain's grace (close the finished body); the hard timeout is the
// context's own deadline. One timer serves them all, set for the
// earliest left: an attempt is timed on thousands of goroutines at once,
// and each timer is allocations and turns of the runtime's timer heap.
type guard struct {
	start  time.Time
	cancel context.CancelCauseFunc
	state  atomic.Int32 // 0 waiting, 1 answered, 2 capped

	mu      sync.Mutex // held while a clock's action (OnSoft) runs, so stop waits for it
	stopped bool
	timer   *time.Timer
	// Each clock's instant since start; 0: not set, or already fired.
	capAt, softAt, closeAt time.Duration
	onSoft                 func(time.Duration)
	closer                 io.Closer
}

const (
	waiting int32 = iota
	answered
	capped
)

// init starts a zero guard's clocks.
func (g *guard) init(start time.Time, req Request, cancel context.CancelCauseFunc) {
	g.start, g.cancel = start, cancel
	g.capAt = max(req.WaitCap, 0) // 0: none
	if req.SoftTimeout > 0 && req.OnSoft != nil {
		g.softAt, g.onSoft = req.SoftTimeout, req.OnSoft
	}
	if g.capAt > 0 || g.softAt > 0 {
		g.mu.Lock()
		g.arm()
		g.mu.Unlock()
	}
}

// arm sets the timer for the earliest clock left. g.mu is held.
func (g *guard) arm() {
	var next time.Duration
	for _, at := range [...]time.Duration{g.capAt, g.softAt, g.closeAt} {
		if at > 0 && (next == 0 || at < next) {
			next = at
		}
	}
	if next == 0 {
		return
	}
	d := next - time.Since(g.start)
	if g.timer == nil {
		g.timer = time.AfterFunc(d, g.fire)
	} else {
		g.timer.Reset(d)
	}
}

// fire runs every clock that is due, then sets the timer for the next.
func (g *guard) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	el := time.Since(g.start)
	if g.capAt > 0 && el >= g.capAt {
		g.capAt = 0
		if g.state.CompareAndSwap(waiting, capped) {
			g.cancel(errWaitCap)
		}
	}
	if g.closeAt > 0 && el >= g.closeAt {
		g.closeAt = 0
		g.closer.Close()
	}
	if g.softAt > 0 && el >= g.softAt {
		g.softAt = 0
		g.onSoft(time.Since(g.start))
	}
	g.arm()
}

// closeAfter closes c in d unless closeDone comes first.
func (g *guard) closeAfter(d time.Duration, c io.Closer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	g.closeAt, g.closer = max(time.Since(g.start)+d, 1), c
	g.arm()
}

// closeDone disarms closeAfter; a timer set for it finds nothing due.
func (g *guard) closeDone() {
	g.mu.Lock()
	g.closeAt, g.closer = 0, nil
	g.mu.Unlock()
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
	g.mu.Lock()
	g.stopped = true
	t := g.timer
	g.mu.Unlock()
	if t != nil {
		t.Stop()
	}
}

// cancelled says why ctx (derived from parent) ended, or "" when it has
// not: the wait cap, the hard timeout (the parent's deadline), or the
// operator cancelling the run.
func cancelled(parent, ctx context.Context) (admit.Outcome, string) {
	if ctx.Err() == nil {
		return "", ""
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, errWaitCap) {
		return admit.WaitCap, "no content within the wait cap"
	}
	if errors.Is(parent.Err(), context.DeadlineExceeded) {
		return admit.Timeout, "hard timeout"
	}
	return admit.Cancelled, "cancelled"
}
