package admit

import "fmt"

// KeyError is a value refused at one key of the policy (budget.deadline,
// breaker.failure_rate): the key stays apart from the message, so the
// caller can say where the key was set (a flag, a variable, a file's
// line) without reading it back out of the text.
type KeyError struct {
	Key string
	Err error
}

// KeyErrorf is a KeyError at key whose message is formatted.
func KeyErrorf(key, format string, a ...any) error {
	return &KeyError{Key: key, Err: fmt.Errorf(format, a...)}
}

func (e *KeyError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *KeyError) Unwrap() error { return e.Err }
