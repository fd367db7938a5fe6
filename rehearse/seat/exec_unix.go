//go:build unix

package seat

import (
	"os/exec"
	"syscall"
)

// inGroup starts the command in its own process group, and makes
// cancellation (hard timeout, wait cap) kill the whole group and every
// process carrying the attempt's mark: a shell's children die with it,
// and so do those that left the group (setsid, a double fork).
func inGroup(cmd *exec.Cmd, mark string) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := killGroup(cmd)
		killMarked(mark)
		return err
	}
}

func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil || cmd.Process.Pid <= 0 {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
