//go:build unix

package seat

import (
	"os/exec"
	"syscall"
)

// inGroup starts the command in its own process group, and makes
// cancellation (hard timeout, wait cap) kill the whole group: a shell's
// children die with it instead of running on after the attempt.
func inGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
}

func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil || cmd.Process.Pid <= 0 {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
