//go:build unix

package summary

import (
	"syscall"
	"time"
)

// cpuTime is the process's user + system time: on a busy machine it says
// what a run cost where wall time only says how long it waited.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
