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
