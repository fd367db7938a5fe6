package ledgerfile

import (
	"time"

	"retrygate/admit"
)

// JobSpend is what a job's rows have spent: the gate's inputs for its
// next attempt. Time is the sum of each sent attempt's elapsed and the
// backoff slept before it; tokens and USD are summed over sent attempts.
func JobSpend(rows []Row) admit.Spent {
	var s admit.Spent
	for i := range rows {
		if rows[i].WasSent() {
			AddSpent(&s, &rows[i])
		}
	}
	return s
}

// AddSpent adds one sent row to a job's spend: the one spend sum, that
// JobSpend, the summary and the replay all use. Time is the row's elapsed
// plus the backoff slept before it, at the log's resolution
// (milliseconds), so a spend summed while a run writes its rows equals
// one summed from its log; tokens and USD are summed (saturating); the
// row uses an attempt.
func AddSpent(s *admit.Spent, r *Row) {
	d := r.Delay.Round(time.Millisecond) + r.Elapsed.Round(time.Millisecond)
	s.Time = admit.AddDuration(s.Time, d)
	s.Tokens = admit.AddTokens(s.Tokens, r.Tokens)
	s.USD = admit.AddUSD(s.USD, r.CostUSD)
	s.Attempts++
}

// Estimate is seed 003's conservative guess at the next attempt from rows
// in file order, by the same rules as the attempt loop (admit.Estimator).
// Rows marked sent=false hold an estimate, not an observation, and are
// skipped; a hand-written refused row still carries the seat's observed
// numbers and counts. seat filters the rows when not "".
func Estimate(rows []Row, seat string) admit.Next {
	var e admit.Estimator
	var usd float64
	for i := range rows {
		r := &rows[i]
		if r.Unsent || (seat != "" && r.Seat != seat) {
			continue
		}
		o := r.Outcome
		if o == "" {
			o = admit.OK // a hand-written row: an attempt that returned
		}
		cut := o == admit.Timeout || o == admit.WaitCap || o == admit.ConnError || o == admit.Cancelled
		firstByte := !cut || (r.Wait > 0 && r.Wait < r.Elapsed)
		p, c := r.PromptTokens, r.CompletionTokens
		if !r.HasSplit {
			p, c = r.Tokens, 0
			if r.Tokens == 0 {
				p = -1 // nothing counted: keep the last estimate
			}
		}
		if p >= 0 {
			e.Observe(o, r.Wait, firstByte, r.Elapsed, p, c)
		} else {
			e.Observe(o, r.Wait, firstByte, r.Elapsed, 0, 0)
		}
		if r.HasCost && r.CostUSD > 0 {
			usd = r.CostUSD
		}
	}
	n := e.Next()
	n.USD = usd
	return n
}
