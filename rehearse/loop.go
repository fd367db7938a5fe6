// Package rehearse runs scratch jobs against seats under a policy: the one
// attempt loop (a per-job state machine), its real-time and virtual-time
// drivers, and the clocks they run on.
package rehearse

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// reasonCancelled is the decision on the row that ends a job the operator
// stopped between two attempts (Ctrl-C during a backoff sleep): the job's
// end has to be written on a row of its own, and no gate check refused it.
const reasonCancelled admit.Reason = "cancelled"

// SeatSpec is one seat of the fallback chain. The real-time driver calls
// Seat (a Planner alone is played in real time by a PlanSeat); the
// virtual-time driver resolves Planner's plans and needs no Seat.
type SeatSpec struct {
	Config  seat.Config // name, model and prices (for cost_usd)
	Seat    seat.Seat
	Planner seat.Planner
}

// Config is what a Loop is built from.
type Config struct {
	Policy Policy
	Seats  []SeatSpec // the fallback chain, in order; jobs start on the first
	Rand   *rand.Rand // jitter (and the virtual driver's arrivals); seeded, so runs repeat
	// Sink receives every row as it is decided. The row is reused once
	// Sink returns: copy what you keep.
	Sink func(*ledgerfile.Row)
	// Events, when set, receives each seat breaker's change of state
	// (closed → open, open → half-open, half-open → open or closed) as a
	// `# event breaker` line to append, timed on the driver's clock (real
	// or virtual). The event is reused once Events returns.
	Events    func(*ledgerfile.Event)
	Run       int // job ids are r<Run>-<k>
	Jobs      int // jobs in the run: k is zero-padded to its width
	Prompt    string
	MaxTokens int
	Holdout   bool // mark every row holdout=true (kept out of tuning)
	// Prompts, when set, replace Prompt: each job sends one of them (its
	// own max_tokens, else MaxTokens) for all its attempts, picked by
	// PromptOrder (OrderRandom with PromptSeed, or OrderSeq).
	Prompts     []Prompt
	PromptOrder string
	PromptSeed  uint64
}

// Ends counts finished jobs by how they ended.
type Ends struct {
	Succeeded, Failed, Unknown, Cancelled int
}

// Total is the number of finished jobs.
func (e Ends) Total() int { return e.Succeeded + e.Failed + e.Unknown + e.Cancelled }

// ActionKind is what a job does next.
type ActionKind uint8

const (
	// Finished: the job has ended; its last row carries job_end.
	Finished ActionKind = iota
	// Send: send one attempt to Seat with a hard timeout and a wait cap.
	Send
	// Sleep: back off for Sleep, then call Woke.
	Sleep
)

// Action is the loop's answer to Start, Done and Woke.
type Action struct {
	Kind    ActionKind
	Seat    int           // Send: index into the chain
	Hard    time.Duration // Send: min(timeouts.hard, what is left of the deadline)
	WaitCap time.Duration // Send: budget.max_wait, enforced live by the seat
	Sleep   time.Duration // Sleep: the backoff
}

// Job is one logical request's state between the loop's calls: the job
// machine (admit.Job: its books, its retry rules' answer, its seat and
// deadline) and what the driver keeps of the attempt in flight. Drivers
// own the memory and reuse it: Start resets everything.
type Job struct {
	ID  string // r<run>-<k>, the Idempotency-Key of every attempt
	End string // job_end once Finished

	m     admit.Job
	delay time.Duration // slept before the next row's attempt

	// the attempt in flight, as the machine planned it
	submit time.Time
	plan   admit.Plan
	prompt int // index into the loop's prompts

	obs  seat.Observation // the virtual driver's resolved attempt
	free *Job             // the virtual driver's free list
}

type seatState struct {
	name    string // Config.Name, else the Seat's own
	cfg     seat.Config
	seat    seat.Seat
	planner seat.Planner
	br      *admit.Breaker
	calls   int       // plans drawn (the virtual driver's PlanFor index)
	busy    int       // the virtual driver's calls in flight (a LoadPlanner's load)
	plan    seat.Plan // the virtual driver's plan of the seat's last call (one, reused)
}

// loopPrompt is one prompt as the loop sends and logs it.
type loopPrompt struct {
	prompt    string
	messages  []seat.Message
	maxTokens int
	sha, tags string
}

// Loop is the one attempt loop: every rule of a job's life between its
// start and its end, as a state machine the drivers step. It holds no
// goroutine and is not safe for concurrent use; the real-time driver
// serialises calls with its own lock.
type Loop struct {
	pol     Policy
	seats   []seatState
	rng     *rand.Rand
	sink    func(*ledgerfile.Row)
	run     int
	width   int
	prompts []loopPrompt
	order   string
	seed    uint64
	holdout bool
	row     ledgerfile.Row
	events  func(*ledgerfile.Event)
	ends    Ends
	// chains are the job machine's view of the fallback chain, one per
	// prompt (a first attempt's spend reservation depends on the prompt);
	// they share the seats' breakers and the retry budget (retry.budget:
	// the retries of every job together).
	chains []admit.Chain
	idbuf  []byte
	// idPrefix is "r<run>-", made once.
	idPrefix []byte

	mu    sync.Mutex // the real-time driver's
	vheap []event    // the virtual driver's, kept between runs
}

// New builds a loop. The policy must be valid and the chain non-empty.
func New(c Config) (*Loop, error) {
	if err := c.Policy.Validate(); err != nil {
		return nil, err
	}
	if len(c.Seats) == 0 {
		return nil, errors.New("fallback: no seat to send to")
	}
	if c.Rand == nil {
		return nil, errors.New("no random source for jitter")
	}
	l := &Loop{
		pol: c.Policy, rng: c.Rand, sink: c.Sink, events: c.Events, run: c.Run,
		order: c.PromptOrder, seed: c.PromptSeed, holdout: c.Holdout,
		width: len(strconv.Itoa(max(c.Jobs, 1))),
	}
	if l.sink == nil {
		l.sink = func(*ledgerfile.Row) {}
	}
	set := c.Prompts
	if len(set) == 0 {
		set = []Prompt{{Prompt: c.Prompt}}
	}
	for _, p := range set {
		l.prompts = append(l.prompts, loopPrompt{
			prompt: p.Prompt, messages: p.Messages, maxTokens: cmp.Or(p.MaxTokens, c.MaxTokens),
			sha: seat.PromptSHA(p.Prompt, p.Messages), tags: strings.Join(p.Tags, ","),
		})
	}
	seen := map[string]bool{}
	for _, s := range c.Seats {
		name := s.Config.Name
		if name == "" && s.Seat != nil {
			name = s.Seat.Name()
		}
		if name == "" {
			return nil, errors.New("fallback: a seat has no name")
		}
		if seen[name] {
			return nil, fmt.Errorf("fallback: seat %q is named twice", name)
		}
		seen[name] = true
		l.seats = append(l.seats, seatState{
			name: name, cfg: s.Config, seat: s.Seat, planner: s.Planner,
			br: admit.NewBreaker(c.Policy.Breaker, BreakerEvents(name, l.events)),
		})
	}
	var gate admit.RetryGate
	if c.Policy.Retry.Budget.Enabled() {
		gate = admit.NewRetryBudget(c.Policy.Retry.Budget)
	}
	for _, p := range l.prompts {
		ch := NewChain(c.Policy, gate)
		for i := range l.seats {
			st := &l.seats[i]
			ch.Seats = append(ch.Seats, ChainSeat(st.name, st.cfg, st.br, c.Policy.Budget, p.prompt, p.messages, p.maxTokens))
		}
		l.chains = append(l.chains, ch)
	}
	return l, nil
}

// Windows are seats' declared context windows by name (none declared:
// nil), for a replay's rule after a context-length error.
func Windows(seats map[string]seat.Config) map[string]int64 {
	var w map[string]int64
	for name, c := range seats {
		if c.ContextWindow > 0 {
			if w == nil {
				w = map[string]int64{}
			}
			w[name] = c.ContextWindow
		}
	}
	return w
}

// WidenNote is the note of an attempt sent on a larger context window
// after seat's context-length error: the row names both attempts' seats.
func WidenNote(seat string) string { return "after context length on " + seat + ": a larger window" }

// NewChain is the job machine's chain for pol, without its seats: the
// budget, the retry rules, the hard timeout, the retry budget (gate: nil
// without one) and the log's resolution. The loop and the proxy build
// theirs with it.
func NewChain(pol Policy, gate admit.RetryGate) admit.Chain {
	return admit.Chain{Budget: pol.Budget, Retry: pol.Retry, Hard: pol.Timeouts.Hard, RetryGate: gate, Round: ledgerfile.Resolution}
}

// ChainSeat is the job machine's view of one seat for one prompt: its
// name, breaker and prices, and what a first attempt there reserves under
// a spend ceiling (price × (the prompt counted locally + max_tokens)).
func ChainSeat(name string, cfg seat.Config, br *admit.Breaker, b admit.Budget, prompt string, msgs []seat.Message, maxTokens int) admit.ChainSeat {
	cs := admit.ChainSeat{Name: name, Breaker: br, Prices: cfg.Prices(), Priced: cfg.Priced(), Window: cfg.ContextWindow}
	if cs.Priced && b.HasSpendCeiling() {
		cs.Reserve = admit.Reservation(cs.Prices, seat.PromptTokens(cfg, seat.RequestText(prompt, msgs)), int64(maxTokens))
	}
	return cs
}

// Breaker is the chain's i-th seat's breaker (for reports and tests).
func (l *Loop) Breaker(i int) *admit.Breaker { return l.seats[i].br }

// Start begins job k (1-based) at now: the deadline is made here, once.
func (l *Loop) Start(j *Job, k int, now time.Time) Action {
	j.m.Start(now, l.pol.Budget.Deadline) // a reused Job keeps its books' memory
	j.ID, j.End, j.delay = l.jobID(k), "", 0
	j.submit = time.Time{} // its plan is next's
	j.prompt = pickPrompt(l.order, l.seed, k, len(l.prompts))
	return l.next(j, now)
}

// jobID formats r<run>-<k> into an arena shared by many ids, so a
// million-job virtual run does not allocate once per job. Arena bytes are
// written once and never changed, which is what makes handing them out as
// strings sound; a retained id keeps only its own arena alive.
func (l *Loop) jobID(k int) string {
	var d [20]byte
	digits := strconv.AppendInt(d[:0], int64(k), 10)
	if l.idPrefix == nil {
		l.idPrefix = append(strconv.AppendInt([]byte{'r'}, int64(l.run), 10), '-')
	}
	n := len(l.idPrefix) + max(len(digits), l.width)
	if cap(l.idbuf)-len(l.idbuf) < n {
		l.idbuf = make([]byte, 0, max(64<<10, n))
	}
	start := len(l.idbuf)
	b := append(l.idbuf, l.idPrefix...)
	for i := len(digits); i < l.width; i++ {
		b = append(b, '0')
	}
	b = append(b, digits...)
	l.idbuf = b
	return unsafe.String(&b[start], len(b)-start)
}

// Woke resumes a job after its backoff sleep.
func (l *Loop) Woke(j *Job, now time.Time) Action { return l.next(j, now) }

// Cancel ends a job the operator stopped while it was not waiting on an
// attempt (sleeping, or about to send): a sent=false row with outcome
// cancelled carries job_end=cancelled. An attempt in flight is ended by
// passing Done an observation with outcome cancelled instead.
func (l *Loop) Cancel(j *Job, now time.Time) Action {
	l.refusalRow(j, now, j.m.Number(), j.m.Seat(), admit.Refuse(reasonCancelled), j.m.Track().Spent(), j.delay, &admit.Plan{})
	l.row.Outcome = admit.Cancelled
	l.row.Note = "stopped before this attempt"
	return l.finish(j, ledgerfile.JobCancelled)
}

// next asks the job machine about the job's next attempt after the wait
// j.delay (the sleep is charged to the deadline): a refusal ends the job
// with its row; an admission is sent.
func (l *Loop) next(j *Job, now time.Time) Action {
	// The plan is made in the job's own (an admitted attempt's Done reads
	// it there); a refused one's is not read again.
	p := &j.plan
	j.m.BeforeTo(p, &l.chains[j.prompt], admit.Ask{Now: now, Waited: j.delay})
	if !p.Decision.Admit {
		l.refusalRow(j, now, p.Attempt, p.Seat, p.Decision, p.Spent, p.Delay, p)
		return l.finish(j, j.m.End())
	}
	j.submit = now
	return Action{Kind: Send, Seat: p.Seat, Hard: p.Hard, WaitCap: l.pol.Budget.MaxWait}
}

// Request is the seat request for a job's attempt (the real-time driver's).
func (l *Loop) Request(j *Job, a Action) seat.Request {
	p := &l.prompts[j.prompt]
	return seat.Request{
		Prompt:         p.prompt,
		Messages:       p.messages,
		MaxTokens:      p.maxTokens,
		IdempotencyKey: j.ID,
		WaitCap:        a.WaitCap,
		SoftTimeout:    l.pol.Timeouts.Soft,
		Stall:          l.pol.Timeouts.Stall,
		Slow5xxAfter:   l.pol.Retry.SlowServerAfter,
	}
}

// Done takes the observation of the job's attempt in flight at now: the
// job machine settles it (billing, cost, breaker), its row is written,
// and the machine takes the row into the job's books and says what
// comes next.
func (l *Loop) Done(j *Job, obs *seat.Observation, now time.Time) Action {
	c := &l.chains[j.prompt]
	p := &j.plan
	a := admit.Attempt{Outcome: obs.Outcome, Billing: obs.Billing, Elapsed: obs.Elapsed}
	priced, note := j.m.Settle(c, p.Seat, now, &a, obs.Usage(), p.Probe)
	obs.Billing = a.Billing
	l.sentRow(j, obs, a.USD, priced, JoinNote(note, obs.Detail))
	taken := ledgerfile.AttemptOf(&l.row)
	mv := j.m.Take(c, p.Seat, &taken, l.rng)
	switch mv.Kind {
	case admit.Ended:
		return l.finish(j, mv.End)
	case admit.Refused:
		l.emit(j)
		// The row carries the sleep this refusal saved: the gate charged it.
		l.refusalRow(j, now, mv.Attempt, mv.Seat, mv.Decision, mv.Spent, mv.Delay, &admit.Plan{})
		if mv.Delay > 0 {
			l.row.Note = JoinNote("refused before sleeping", l.row.Note)
		}
		return l.finish(j, mv.End)
	}
	l.emit(j)
	j.delay = mv.Delay
	if mv.Delay <= 0 {
		return l.next(j, now)
	}
	return Action{Kind: Sleep, Sleep: mv.Delay}
}

// finish writes the pending row with job_end.
func (l *Loop) finish(j *Job, end string) Action {
	j.End = end
	l.row.JobEnd = end
	switch end {
	case ledgerfile.JobSucceeded:
		l.ends.Succeeded++
	case ledgerfile.JobUnknown:
		l.ends.Unknown++
	case ledgerfile.JobCancelled:
		l.ends.Cancelled++
	default:
		l.ends.Failed++
	}
	l.emit(j)
	return Action{Kind: Finished}
}

func (l *Loop) emit(j *Job) {
	l.sink(&l.row)
	j.delay = 0
}

// base is what a row of job j's attempt n on the chain's seat s carries
// before its numbers; p is the plan it was admitted or refused by (its
// retry budget window).
func (l *Loop) base(j *Job, ts time.Time, n, s int, spent admit.Spent, delay time.Duration, p *admit.Plan) RowBase {
	st := &l.seats[s]
	pr := &l.prompts[j.prompt]
	return RowBase{
		TS: ts, Job: j.ID, Attempt: n, Seat: st.name, Model: st.cfg.Model,
		Delay: delay, Spent: spent, Holdout: l.holdout, Fallback: s > 0,
		PromptSHA: pr.sha, Tags: pr.tags, Reserve: l.chains[j.prompt].Seats[s].Reserve,
		Window: p.Window, HasWindow: p.HasWindow, Widen: p.Widen,
	}
}

// refusalRow fills the row for attempt n refused before sending on seat
// s: its numbers are the estimate the gate saw.
func (l *Loop) refusalRow(j *Job, now time.Time, n, s int, d admit.Decision, spent admit.Spent, delay time.Duration, p *admit.Plan) {
	b := l.base(j, now, n, s, spent, delay, p)
	RefusalRow(&l.row, &b, j.m.Track(), d)
}

// sentRow fills the row for the attempt in flight.
func (l *Loop) sentRow(j *Job, o *seat.Observation, cost float64, priced bool, note string) {
	p := &j.plan
	b := l.base(j, j.submit, p.Attempt, p.Seat, p.Spent, p.Delay, p)
	SentRow(&l.row, &b, j.m.Track(), o, cost, priced, note)
	PriceCache(&l.row, &l.seats[p.Seat].cfg, o)
}
