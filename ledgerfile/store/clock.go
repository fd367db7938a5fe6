package store

import "time"

// Reading is one look at the clocks a file's books are measured on. Boot
// is the machine's boot-time clock (Linux CLOCK_BOOTTIME: monotonic,
// counts suspend, and no wall-clock change moves it); BootID names the
// boot it belongs to ("" when the system has none: then only Wall is
// used).
type Reading struct {
	Wall   time.Time
	Boot   time.Duration
	BootID string
}

// Clock reads the clocks. SystemClock is the real one; tests pass their own.
type Clock func() (Reading, error)

// fileClock is the books file's own clock: the time it last gave, and
// the reading it gave it at. Its next time is that time plus what passed
// since: on the boot clock while the boot is the same, which no wall-clock
// change moves, else on the wall clock (after a reboot, or a file shared
// by machines), where a wall clock that went back counts as no time
// passed. So the clock never goes back: a wall clock set back gives no
// job time back, and one set forward forgets nothing.
type fileClock struct {
	Now    time.Time     `json:"now"`
	Wall   time.Time     `json:"wall"`
	Boot   time.Duration `json:"boot_ns"`
	BootID string        `json:"boot_id,omitempty"`
}

// at is the file's time at reading r; the clock is set to it.
func (c *fileClock) at(r Reading) time.Time {
	now := r.Wall
	if !c.Now.IsZero() {
		var d time.Duration
		if c.BootID != "" && c.BootID == r.BootID {
			d = r.Boot - c.Boot
		} else {
			d = r.Wall.Sub(c.Wall)
		}
		now = c.Now.Add(max(d, 0))
	}
	*c = fileClock{Now: now, Wall: r.Wall, Boot: r.Boot, BootID: r.BootID}
	return now
}
