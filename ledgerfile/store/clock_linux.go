//go:build linux

package store

import (
	"bytes"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// SystemClock reads the wall clock, the boot-time clock (CLOCK_BOOTTIME:
// monotonic, counting suspend) and the boot id that names this boot.
func SystemClock() (Reading, error) {
	r := Reading{Wall: time.Now()}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return r, nil // no boot clock: only the wall clock is used
	}
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil || len(bytes.TrimSpace(id)) == 0 {
		return r, nil
	}
	r.Boot = time.Duration(ts.Nano())
	r.BootID = string(bytes.TrimSpace(id))
	return r, nil
}
