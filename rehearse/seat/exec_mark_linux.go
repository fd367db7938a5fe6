//go:build linux

package seat

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// killMarked kills every process whose environment carries mark (the
// attempt's RETRYGATE_ATTEMPT value, inherited by every descendant): the
// ones that left the process group with setsid or a double fork and were
// reparented away from the command. It loops because a kill can orphan
// (not stop) a process that forks while it is being read; a few passes
// end it. Processes of other users are unreadable and skipped.
func killMarked(mark string) {
	if mark == "" {
		return
	}
	needle := []byte(markEnv + "=" + mark + "\x00")
	self := os.Getpid()
	for pass := 0; pass < 4; pass++ {
		d, err := os.Open("/proc")
		if err != nil {
			return
		}
		names, _ := d.Readdirnames(-1)
		d.Close()
		killed := 0
		for _, name := range names {
			pid, err := strconv.Atoi(name)
			if err != nil || pid == self || pid <= 1 {
				continue
			}
			env, err := os.ReadFile("/proc/" + name + "/environ")
			if err != nil || !bytes.Contains(env, needle) {
				continue
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		if killed == 0 {
			return
		}
	}
}
