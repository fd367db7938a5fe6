//go:build !linux

package store

import "time"

// SystemClock reads the wall clock only: without Linux's boot-time clock
// and boot id, every claim is measured on the wall clock (see Job.Since).
func SystemClock() (Reading, error) { return Reading{Wall: time.Now()}, nil }
