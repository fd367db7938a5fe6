// Package summary is the one aggregator over rehearsal.log rows.
package summary

import (
	"strings"

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
//
// A job is every row of its id within one log (DESIGN.md, "A job,
// exactly"), whatever other jobs' rows stand between them and whether or
// not a job_end came before: a job's books are kept until its log ends
// (EndLog, or a row of another log), as the summary keeps its figures,
// and the same id in the next log is another job.
type Replayer struct {
	rules ledgerfile.Rules
	jobs  map[string]*ledgerfile.JobGate // every job of the log being read
	// cur is the current job's books: most rows follow their job's
	// previous row, and skip the map.
	cur    *ledgerfile.JobGate
	curJob string
	single ledgerfile.JobGate // a row without a job id: a job of its own
	file   string
	sc     ledgerfile.GateScratch // the gates judge one row at a time
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
	p := &Replayer{rules: rules, jobs: map[string]*ledgerfile.JobGate{}}
	p.single.Share(&p.sc)
	return p
}

// WithWindows gives the replay the policy's seats' context windows by
// name: after a context-length error, a row on a seat with a larger one
// is the retry the policy allows.
func (p *Replayer) WithWindows(w map[string]int64) *Replayer {
	p.rules.Windows = w
	return p
}

// Add re-decides one row. Rows must come in log order. A row without a job
// id is a job of its own.
func (p *Replayer) Add(r *ledgerfile.Row, file string) Replayed {
	if file != p.file {
		p.EndLog()
		p.file = file
	}
	d, before := p.judge(r)
	return replayed(r, file, d, before, LoggedDecision(r))
}

// judge re-decides one row and takes it into its job's books: the
// decision and the job's spend before the row.
func (p *Replayer) judge(r *ledgerfile.Row) (admit.Decision, admit.Spent) {
	d, before := p.gate(r.Job).Judge(p.rules, r)
	p.rules.Counted(r)
	return d, before
}

// EndLog says the log being read has ended: its jobs' books go, and a job
// id that comes again is a job of the next log.
func (p *Replayer) EndLog() {
	clear(p.jobs)
	p.cur, p.curJob = nil, ""
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
		p.single.Reset()
		return &p.single
	}
	if p.cur != nil && job == p.curJob {
		return p.cur
	}
	g, ok := p.jobs[job]
	if !ok {
		job = strings.Clone(job) // a row's strings live until the next row
		g = new(ledgerfile.JobGate)
		g.Share(&p.sc)
		p.jobs[job] = g
	}
	p.cur, p.curJob = g, job
	return g
}
