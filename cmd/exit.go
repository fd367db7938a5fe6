package cmd

import (
	"errors"
	"fmt"
)

// Exit codes, the same for every subcommand (DESIGN.md).
const (
	ExitOK     = 0 // admit / pass / done
	ExitRefuse = 1 // refuse / a CI threshold failed
	ExitBad    = 2 // bad input or usage, named in the message
)

// exitError carries an exit code; a nil Err means the command already
// said everything it had to (a refusal printed on stdout).
type exitError struct {
	Code int
	Err  error
	Hint string
}

func (e *exitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *exitError) Unwrap() error { return e.Err }

// badInput is exit 2 with a message naming what was wrong.
func badInput(format string, a ...any) error {
	return &exitError{Code: ExitBad, Err: fmt.Errorf(format, a...)}
}

// badInputErr wraps an error as exit 2 (keeping it for errors.Is/As).
func badInputErr(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{Code: ExitBad, Err: err}
}

// withHint adds a `retrygate: hint: …` line after the error.
func withHint(err error, hint string) error {
	var ee *exitError
	if errors.As(err, &ee) {
		ee.Hint = hint
		return ee
	}
	return &exitError{Code: ExitBad, Err: err, Hint: hint}
}

// refused is exit 1 after the command printed its decision or failures.
var refused = &exitError{Code: ExitRefuse}

// exitStatus is the EXIT STATUS section every command's long help ends with.
func exitStatus(zero, one string) string {
	return "\n\nEXIT STATUS\n" +
		"  0  " + zero + "\n" +
		"  1  " + one + "\n" +
		"  2  bad input or usage: a flag, a config key or a log line, named in the message\n"
}
