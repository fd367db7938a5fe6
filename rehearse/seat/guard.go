package seat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// The causes an attempt's own clocks cancel it with.
var (
	errWaitCap     = errors.New("no content within the wait cap")
	errHardTimeout = errors.New("hard timeout")
	errStall       = errors.New("stalled")
)

// guard runs one attempt's clocks: the hard timeout (the context's
// deadline: cut), the wait cap (cut unless the answer has begun), the
// stall window (cut when no byte came for that long after the answer
// began), the soft timeout (tell the caller while no answer has begun,
// cut nothing) and the drain's grace (close the finished body). One
// timer serves them all, set for the earliest left: an attempt is timed
// on thousands of goroutines at once, and each timer is allocations and
// turns of the runtime's timer heap.
//
// A cut happens on the timer's own goroutine: it notes the instant,
// cancels the attempt's context and closes the answer's body there, so
// neither the server seeing the cut nor the elapsed the row records
// waits for the reading goroutine to be scheduled again. Under load
// (64 attempts cut at once, each then counting its tokens on the same
// CPUs) that wait was most of a hard timeout's overshoot.
type guard struct {
	start  time.Time
	cancel context.CancelCauseFunc
	state  atomic.Int32 // 0 waiting, 1 answered, 2 capped
	// cutAt is when the attempt was cut (its context ended), in
	// nanoseconds since start; 0: not cut.
	cutAt atomic.Int64
	// last is when the latest answer byte arrived, in nanoseconds since
	// start (the stall window's clock).
	last  atomic.Int64
	stall time.Duration // 0: no stall window

	mu      sync.Mutex // held while a clock's action (OnSoft) runs, so stop waits for it
	stopped bool
	timer   *time.Timer
	unhook  func() bool
	// Each clock's instant since start; 0: not set, or already fired.
	capAt, softAt, closeAt, hardAt time.Duration
	stallOn                        bool // the answer began: the stall window runs
	onSoft                         func(time.Duration)
	closer                         io.Closer // the drain's
	body                           io.Closer // the answer's, closed by a cut
}

const (
	waiting int32 = iota
	answered
	capped
)

// init starts a zero guard's clocks for an attempt whose context is ctx.
func (g *guard) init(start time.Time, ctx context.Context, req Request, cancel context.CancelCauseFunc) {
	g.start, g.cancel = start, cancel
	g.capAt = max(req.WaitCap, 0) // 0: none
	g.stall = max(req.Stall, 0)
	if req.SoftTimeout > 0 && req.OnSoft != nil {
		g.softAt, g.onSoft = req.SoftTimeout, req.OnSoft
	}
	if dl, ok := ctx.Deadline(); ok {
		g.hardAt = max(dl.Sub(start), 1)
	}
	// Whatever else ends the context (the operator, a parent's deadline
	// that came first) cuts the attempt the same way.
	g.unhook = context.AfterFunc(ctx, func() { g.cut(nil) })
	if g.capAt > 0 || g.softAt > 0 || g.hardAt > 0 {
		g.mu.Lock()
		g.arm()
		g.mu.Unlock()
	}
}

// arm sets the timer for the earliest clock left. g.mu is held.
func (g *guard) arm() {
	var next time.Duration
	stallAt := time.Duration(0)
	if g.stallOn {
		stallAt = time.Duration(g.last.Load()) + g.stall
	}
	for _, at := range [...]time.Duration{g.capAt, g.softAt, g.closeAt, g.hardAt, stallAt} {
		if at > 0 && (next == 0 || at < next) {
			next = at
		}
	}
	if next == 0 || g.stopped {
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
	var shut io.Closer
	g.mu.Lock()
	defer func() {
		g.mu.Unlock()
		if shut != nil {
			shut.Close()
		}
	}()
	if g.stopped {
		return
	}
	el := time.Since(g.start)
	var cause error
	if g.hardAt > 0 && el >= g.hardAt {
		g.hardAt, cause = 0, errHardTimeout
	}
	if g.capAt > 0 && el >= g.capAt {
		g.capAt = 0
		if g.state.CompareAndSwap(waiting, capped) && cause == nil {
			cause = errWaitCap
		}
	}
	if g.stallOn && el-time.Duration(g.last.Load()) >= g.stall {
		g.stallOn = false
		if cause == nil {
			cause = errStall
		}
	}
	if cause != nil {
		shut = g.cutLocked(el, cause)
	}
	if g.closeAt > 0 && el >= g.closeAt {
		g.closeAt = 0
		g.closer.Close()
	}
	if g.softAt > 0 && el >= g.softAt {
		g.softAt = 0
		// The soft timeout's note means no answer yet, and nothing else.
		if g.state.Load() == waiting {
			g.onSoft(time.Since(g.start))
		}
	}
	g.arm()
}

// cut ends the attempt now (cause nil: its context already ended).
func (g *guard) cut(cause error) {
	g.mu.Lock()
	shut := g.cutLocked(time.Since(g.start), cause)
	g.mu.Unlock()
	if shut != nil {
		shut.Close()
	}
}

// cutLocked notes the first cut's instant, cancels the context with
// cause and returns the body for the caller to close once g.mu is
// released. g.mu is held.
func (g *guard) cutLocked(el time.Duration, cause error) io.Closer {
	g.cutAt.CompareAndSwap(0, int64(max(el, 1)))
	if cause != nil {
		g.cancel(cause)
	}
	if g.stopped {
		return nil
	}
	b := g.body
	g.body = nil
	return b
}

// cutInstant is when the attempt was cut, if it was.
func (g *guard) cutInstant() (time.Duration, bool) {
	at := g.cutAt.Load()
	return time.Duration(at), at > 0
}

// hold gives the guard the answer's body, for a cut to close (every
// read on it then returns). It reports false when the attempt was cut
// already: the caller closes it.
func (g *guard) hold(body io.Closer) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, cut := g.cutInstant(); cut {
		return false
	}
	g.body = body
	return true
}

// touch notes an answer byte's arrival at t (the stall window's clock).
func (g *guard) touch(t time.Duration) { g.last.Store(int64(t)) }

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
// server chose to send): from here on the wait cap cannot fire, the
// soft timeout says nothing and the stall window runs. It reports false
// when the cap has already fired.
func (g *guard) answer() bool {
	if g.state.CompareAndSwap(waiting, answered) {
		if g.stall > 0 {
			g.mu.Lock()
			g.stallOn = true
			g.arm()
			g.mu.Unlock()
		}
		return true
	}
	return g.state.Load() == answered
}

// stop disarms the clocks; once it returns OnSoft is not running and will
// not run, and no cut closes anything.
func (g *guard) stop() {
	if g.unhook != nil {
		g.unhook()
	}
	g.mu.Lock()
	g.stopped = true
	g.body = nil
	t := g.timer
	g.mu.Unlock()
	if t != nil {
		t.Stop()
	}
}

// cancelled says why ctx (derived from parent) ended, or "" when it has
// not: the wait cap, the hard timeout (the guard's, or the parent's
// deadline), the stall window, or the operator cancelling the run.
func (g *guard) cancelled(parent, ctx context.Context) (admit.Outcome, string) {
	if ctx.Err() == nil {
		return "", ""
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errWaitCap):
		return admit.WaitCap, "no content within the wait cap"
	case errors.Is(cause, errStall):
		return admit.Reset, fmt.Sprintf("stalled: no byte for %s", g.stall)
	case errors.Is(cause, errHardTimeout), errors.Is(parent.Err(), context.DeadlineExceeded):
		return admit.Timeout, "hard timeout"
	}
	return admit.Cancelled, "cancelled"
}
