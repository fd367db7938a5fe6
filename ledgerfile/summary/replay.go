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
// A job is every row of its id (DESIGN.md, "A job, exactly"), whatever
// other jobs' rows stand between them: a job's books are kept when
// another job's row interrupts it, ended or not. An ended job's books are
// kept while endWindow more jobs end, as the summary keeps its figures,
// so memory follows the jobs open at once, not the log.
type Replayer struct {
	rules ledgerfile.Rules
	open  map[string]*ledgerfile.JobGate // jobs another job's rows interrupted before their end
	// The current job's books: own, while its rows are adjacent (as they
	// are unless jobs interleave), so that most jobs are never allocated
	// or put in a map.
	cur    *ledgerfile.JobGate
	curJob string
	own    ledgerfile.JobGate
	single ledgerfile.JobGate // a row without a job id: a job of its own
	ended  bool               // the current job's last row so far carried job_end
	// ring holds the books of jobs past their job_end row, reused in
	// place; once full, head is the oldest; endedAt finds a job's slot.
	ring    []ringJob
	head    int
	endedAt map[string]int
}

type ringJob struct {
	id string
	g  ledgerfile.JobGate
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
	return &Replayer{rules: rules, open: map[string]*ledgerfile.JobGate{}, endedAt: map[string]int{}}
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
		p.ended = r.JobEnd != ""
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
		return p.cur
	}
	p.stash()
	p.ended = false
	switch g, ok := p.open[job]; {
	case ok:
		p.cur = g
	default:
		if i, ok := p.endedAt[job]; ok {
			// A row after its job's end: the job goes on, with its books.
			p.own, p.ring[i].g = p.ring[i].g, p.own
			p.ring[i].id = ""
			delete(p.endedAt, job)
		} else {
			p.own.Reset()
		}
		p.cur = &p.own
	}
	p.curJob = strings.Clone(job) // a row's strings live until the next row
	return p.cur
}

// stash puts the current job's books away as another job's row comes:
// an ended job's into the ring, an open one's into open.
func (p *Replayer) stash() {
	if p.cur == nil || p.cur == &p.single {
		return
	}
	switch {
	case !p.ended && p.cur == &p.own:
		g := new(ledgerfile.JobGate)
		*g, p.own = p.own, ledgerfile.JobGate{} // the books take their room with them
		p.open[p.curJob] = g
	case p.ended:
		if p.cur != &p.own {
			delete(p.open, p.curJob)
		}
		p.retire(p.cur)
	}
	p.cur = nil
}

// retire keeps an ended job's books in the ring, in the oldest slot once
// it holds endWindow jobs.
func (p *Replayer) retire(g *ledgerfile.JobGate) {
	var i int
	if len(p.ring) < endWindow {
		p.ring = append(p.ring, ringJob{})
		i = len(p.ring) - 1
	} else {
		i, p.head = p.head, (p.head+1)%endWindow // the oldest
	}
	slot := &p.ring[i]
	if slot.id != "" {
		delete(p.endedAt, slot.id)
	}
	slot.id = p.curJob
	if g == &p.own {
		slot.g, p.own = p.own, slot.g // the slot's old room becomes own's
	} else {
		slot.g = *g
	}
	p.endedAt[slot.id] = i
}
