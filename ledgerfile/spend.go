package ledgerfile

import "retrygate/admit"

// JobSpend is what a job's rows have spent: the gate's inputs for its
// next attempt. Time is the sum of each sent attempt's elapsed and the
// backoff slept before it; tokens and USD are summed over sent attempts.
func JobSpend(rows []Row) admit.Spent {
	var s admit.Spent
	for i := range rows {
		r := &rows[i]
		if !r.WasSent() {
			continue
		}
		s.Time += r.Delay + r.Elapsed
		s.Tokens += r.Tokens
		s.USD += r.CostUSD
		s.Attempts++
	}
	return s
}

// Estimate is seed 003's conservative guess at the next attempt, from
// rows in file order: wait = the last observed wait, elapsed = the last
// elapsed of an attempt that actually returned, tokens = the last prompt
// + completion tokens. Refused rows count when they carry an observation
// (a hand-written row). seat filters the rows when not "".
func Estimate(rows []Row, seat string) admit.Next {
	var n admit.Next
	gotWait, gotElapsed, gotTokens := false, false, false
	for i := len(rows) - 1; i >= 0 && !(gotWait && gotElapsed && gotTokens); i-- {
		r := &rows[i]
		if seat != "" && r.Seat != seat {
			continue
		}
		if r.Unsent {
			continue // a sent=false row holds an estimate, not an observation
		}
		if !gotWait && r.Outcome != "timeout" && r.Outcome != "conn_error" && r.Outcome != "cancelled" {
			n.Wait, gotWait = r.Wait, true
		}
		if !gotElapsed && r.Returned() {
			n.Elapsed, gotElapsed = r.Elapsed, true
		}
		if !gotTokens && r.Tokens > 0 {
			n.Tokens, gotTokens = r.Tokens, true
			n.USD = r.CostUSD
		}
	}
	return n
}
