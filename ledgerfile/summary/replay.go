// Package summary is the one aggregator over rehearsal.log rows.
package summary

import (
	"retrygate/admit"
	"retrygate/ledgerfile"
)

// Replayer re-decides logged attempts under another budget: each row is
// put to admit.Decide with the job's spend recomputed from its earlier
// rows in the log (spent time = Σ elapsed_s + delay_s of earlier sent
// attempts, tokens and USD summed likewise, used = how many were sent)
// and the row's own wait, elapsed, tokens and cost as the next attempt.
// It is a per-attempt counterfactual over what happened, not a
// re-simulation: a refusal now does not remove the rows that followed it.
type Replayer struct {
	budget admit.Budget
	jobs   map[string]*replaySpend
}

type replaySpend struct{ s admit.Spent }

// Replayed is one row's two decisions.
type Replayed struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Job     string `json:"job,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	Seat    string `json:"seat,omitempty"`
	HeldOut bool   `json:"held_out"`
	Logged  string `json:"logged"` // the decision the log recorded ("admit" for a sent row without one)
	Now     string `json:"now"`    // the decision under the replayed budget
	// Also lists every failing check after the first, in gate order.
	Also []string `json:"also,omitempty"`

	// The gate's inputs, as replayed.
	WaitS       float64 `json:"wait_s"`
	ElapsedS    float64 `json:"elapsed_s"`
	Tokens      int64   `json:"tokens"`
	SpentS      float64 `json:"spent_s"`
	SpentTokens int64   `json:"spent_tokens"`
	Used        int     `json:"used"`

	Spent admit.Spent    `json:"-"`
	Next  admit.Next     `json:"-"`
	Gate  admit.Decision `json:"-"`
}

// Changed reports whether the row flips between admitted and refused.
func (r Replayed) Changed() bool { return (r.Logged == "admit") != (r.Now == "admit") }

// Refused reports whether the replayed budget refuses the row.
func (r Replayed) Refused() bool { return r.Now != "admit" }

// NewReplayer replays rows under b.
func NewReplayer(b admit.Budget) *Replayer {
	return &Replayer{budget: b, jobs: map[string]*replaySpend{}}
}

// Add re-decides one row. Rows must come in log order. A row without a job
// id is a job of its own; its spend is what the row itself recorded
// (spent_s, spent_tokens, used), zero when it recorded none.
func (p *Replayer) Add(r *ledgerfile.Row, file string) Replayed {
	var sp *replaySpend
	if r.Job == "" {
		sp = &replaySpend{}
		if r.HasSpent {
			sp.s = admit.Spent{Time: r.SpentS, Tokens: r.SpentTokens, Attempts: r.Used, USD: r.SpentUSD}
		}
	} else if sp = p.jobs[r.Job]; sp == nil {
		sp = &replaySpend{}
		p.jobs[r.Job] = sp
	}
	next := admit.Next{Wait: r.Wait, Elapsed: r.Elapsed, Tokens: r.Tokens, USD: r.CostUSD}
	d := admit.Decide(p.budget, sp.s, next)
	out := Replayed{
		File: file, Line: r.Line, Job: r.Job, Attempt: r.Attempt, Seat: r.Seat, HeldOut: r.Holdout,
		Logged: "admit", Now: d.String(), Spent: sp.s, Next: next, Gate: d,
	}
	for _, f := range d.Failing[min(1, len(d.Failing)):] {
		out.Also = append(out.Also, string(f))
	}
	out.WaitS, out.ElapsedS, out.Tokens = r.Wait.Seconds(), r.Elapsed.Seconds(), r.Tokens
	out.SpentS, out.SpentTokens, out.Used = sp.s.Time.Seconds(), sp.s.Tokens, sp.s.Attempts
	sent := r.WasSent()
	if !sent {
		out.Logged = r.Decision
		if out.Logged == "" || out.Logged == "admit" {
			out.Logged = "refuse" // sent=false without a reason
		}
	}
	// The retry rules' refusals are not the budget's to overturn.
	if d.Admit && !sent && (r.Reason() == string(admit.ReasonPermanentError) || r.Reason() == string(admit.ReasonBreakerOpen)) {
		out.Now = r.Decision
	}
	if r.Job != "" && r.JobEnd != "" {
		delete(p.jobs, r.Job) // job_end is on a job's last row: its spend is done with
	}
	if sent {
		sp.s.Time += r.Elapsed + r.Delay
		sp.s.Tokens += r.Tokens
		sp.s.USD += r.CostUSD
		sp.s.Attempts++
	}
	return out
}
