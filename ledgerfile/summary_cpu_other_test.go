//go:build !unix

package ledgerfile

import "time"

func cpuTime() (time.Duration, bool) { return 0, false }
