// Package realtime is the one allowance every test that waits on a real
// clock shares. Tests run on shared, loaded machines, where a goroutine or
// a whole process can be scheduled a second late, so a test asserts the
// event (the attempt was cut, the process exited) and bounds real time
// only by a ceiling that a hang reaches and load does not.
// RETRYGATE_TIMING_SLACK (a Go duration) widens every such bound.
package realtime

import (
	"os"
	"time"
)

// Env is the variable that widens every real-time bound in the tests.
const Env = "RETRYGATE_TIMING_SLACK"

// hang is how late past its due time a thing may happen before a test
// calls it a hang: far beyond scheduling noise on a loaded 2-core box
// (a few hundred milliseconds at worst), and short enough that waiting
// for the server to close (the hostile servers hold on for 5 s or more)
// is still caught.
const hang = 2 * time.Second

// Slack is RETRYGATE_TIMING_SLACK; 0 when unset, unparsable or negative.
func Slack() time.Duration {
	d, err := time.ParseDuration(os.Getenv(Env))
	if err != nil {
		return 0
	}
	return max(d, 0)
}

// Hang is the allowance past a due instant that only a hang reaches.
func Hang() time.Duration { return hang + Slack() }

// By is the latest a thing due at d may happen before a test calls it a
// hang: d plus Hang.
func By(d time.Duration) time.Duration { return d + Hang() }
