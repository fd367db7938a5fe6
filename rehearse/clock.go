package rehearse

import (
	"context"
	"time"
)

// Clock is where the real-time driver reads the time and sleeps. The
// virtual-time driver keeps its own event clock and needs none.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or returns ctx's error as soon as ctx is done.
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock (with Go's monotonic reading, so durations
// between two Now calls are immune to clock steps).
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits on a timer or ctx, whichever ends first.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
