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
