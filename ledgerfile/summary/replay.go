// Package summary is the one aggregator over rehearsal.log rows.
package summary

import (
	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// Replayer re-decides logged rows under a policy's budget and retry
// rules, making at each row the decision the attempt loop makes there
// (ledgerfile.JobGate): the retry rules after a failure, the gate on the
// job's spend with the backoff charged before it, and the seat's estimate
// from the job's earlier attempts. Replaying a log under the policy that
// wrote it changes no decision. It is a per-row counterfactual over what
// happened, not a re-simulation: a refusal now does not remove the rows
// that followed it.
type Replayer struct {
	rules ledgerfile.Rules
	jobs  map[string]*ledgerfile.JobGate // open jobs that another job's rows interrupted
	// The current job's books: own, while its rows are adjacent (as they
	// are unless jobs interleave), so that most jobs are never allocated
	// or put in the map; once interrupted, its books move to the map.
	cur    *ledgerfile.JobGate
	curJob string
	own    ledgerfile.JobGate
	single ledgerfile.JobGate // a row without a job id: a job of its own
	ended  bool               // the current job's last row so far carried job_end
}

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

// NewReplayer replays rows under b and the retry rules r.
func NewReplayer(b admit.Budget, r admit.RetryPolicy) *Replayer {
	rules := ledgerfile.Rules{Budget: b, Retry: r}
	if r.Budget.Enabled() {
		rules.Window = admit.NewRetryBudget(r.Budget)
	}
	return &Replayer{rules: rules, jobs: map[string]*ledgerfile.JobGate{}}
}

// Add re-decides one row. Rows must come in log order. A row without a job
// id is a job of its own.
func (p *Replayer) Add(r *ledgerfile.Row, file string) Replayed {
	d, before := p.judge(r)
	return replayed(r, file, d, before, LoggedDecision(r))
}

// judge re-decides one row and takes it into its job's books: the
// decision and the job's spend before the row.
func (p *Replayer) judge(r *ledgerfile.Row) (admit.Decision, admit.Spent) {
	d, before := p.gate(r.Job).Judge(p.rules, r)
	p.rules.Counted(r)
	if r.Job != "" {
		p.ended = false
	}
	if r.Job != "" && r.JobEnd != "" {
		// job_end is on a job's last row: its books are let go, but kept
		// while the job stays the current one, for a row of it right
		// after its end (a job is every row of its id).
		if p.cur != &p.own {
			delete(p.jobs, r.Job)
		}
		p.ended = true
	}
	return d, before
}

// replayed is one row's two decisions, the logged one and d.
func replayed(r *ledgerfile.Row, file string, d admit.Decision, before admit.Spent, logged string) Replayed {
	next := admit.Next{Wait: r.Wait, Gen: r.Gen(), Tokens: r.Tokens, USD: r.CostUSD}
	out := Replayed{
		File: file, Line: r.Line, Job: r.Job, Attempt: r.Attempt, Seat: r.Seat, HeldOut: r.Holdout,
		Logged: logged, Now: d.String(), Spent: before, Next: next, Gate: d,
	}
	for _, f := range d.Failing[min(1, len(d.Failing)):] {
		out.Also = append(out.Also, string(f))
	}
	out.WaitS, out.ElapsedS, out.Tokens = Seconds(r.Wait), Seconds(r.Elapsed), r.Tokens
	out.SpentS, out.SpentTokens, out.Used = Seconds(before.Time), before.Tokens, before.Attempts
	return out
}

// gate is the books of job, which becomes the current job.
func (p *Replayer) gate(job string) *ledgerfile.JobGate {
	if job == "" {
		p.single = ledgerfile.JobGate{}
		return &p.single
	}
	if p.cur != nil && job == p.curJob {
		if p.ended && p.cur != &p.own {
			p.jobs[job] = p.cur // its books were let go at its end: they are in use again
		}
		return p.cur
	}
	if p.cur == &p.own && !p.ended {
		// Jobs interleave: the current one's books move to the map (and
		// take their room with them).
		g := new(ledgerfile.JobGate)
		*g = p.own
		p.jobs[p.curJob] = g
		p.own = ledgerfile.JobGate{}
	}
	if g, ok := p.jobs[job]; ok {
		p.cur = g
	} else {
		p.own.Reset()
		p.cur = &p.own
	}
	p.curJob = job
	return p.cur
}
