package summary

import (
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
)

// Gen is a sent attempt's generation time, elapsed − wait: first content
// to last byte. ok is false for a row that was not sent, or whose elapsed
// is shorter than its wait (a hand-written row can say so).
func Gen(r *ledgerfile.Row) (time.Duration, bool) {
	if !r.WasSent() || r.Elapsed < r.Wait {
		return 0, false
	}
	return r.Elapsed - r.Wait, true
}

// DistAcc gathers one more distribution of durations beside a summary's
// (gen, for report --html), counted and read exactly as the summary's own.
type DistAcc struct{ v values }

// AddDur counts one duration.
func (a *DistAcc) AddDur(d time.Duration) { a.v.addDur(d) }

// Dist finishes the distribution; the accumulator is empty afterwards.
func (a *DistAcc) Dist() Dist { return newDist(a.v.sorted(secExp)) }
