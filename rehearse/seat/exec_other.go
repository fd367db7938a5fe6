//go:build !unix

package seat

import "os/exec"

// inGroup leaves exec's default: cancellation kills the process itself.
func inGroup(*exec.Cmd, string) {}

func killGroup(*exec.Cmd) error { return nil }

func killMarked(string) {}
