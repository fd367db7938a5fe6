package admit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// What came back in full sets the generation estimate; our own cut-offs
// and refused connections do not.
func TestEstimatorGenFromWhatReturned(t *testing.T) {
	for _, o := range Outcomes {
		var e Estimator
		e.Observe(&Attempt{Outcome: o, Content: true, Wait: time.Second, Elapsed: 5 * time.Second})
		returned := o != Timeout && o != WaitCap && o != Cancelled && o != ConnError
		if returned {
			assert.Equal(t, 4*time.Second, e.Next().Gen, o)
		} else {
			assert.Zero(t, e.Next().Gen, o)
		}
	}
}

// An error answer's wait is an observed wait (DESIGN.md: the last
// observed wait on that seat): a slow 500 that took 12 s to come back
// makes the next attempt's wait 12 s, not whatever an older answer said.
func TestEstimatorWaitOfAnErrorAnswer(t *testing.T) {
	for _, o := range []Outcome{ServerError, RateLimited, ClientError} {
		var e Estimator
		e.Observe(&Attempt{Outcome: OK, Content: true, Wait: time.Second, Elapsed: 3 * time.Second})
		e.Observe(&Attempt{Outcome: o, Wait: 12 * time.Second, Elapsed: 12 * time.Second})
		assert.Equal(t, 12*time.Second, e.Next().Wait, o)
	}
	// A reset before any content says nothing of the wait (the log writes 0).
	var e Estimator
	e.Observe(&Attempt{Outcome: OK, Content: true, Wait: time.Second, Elapsed: 3 * time.Second})
	e.Observe(&Attempt{Outcome: Reset, Elapsed: 2 * time.Second})
	assert.Equal(t, time.Second, e.Next().Wait)
}
