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

// Job is one logical request's state between the loop's calls. Drivers
// own the memory and reuse it: Start resets everything.
type Job struct {
	ID  string // r<run>-<k>, the Idempotency-Key of every attempt
	End string // job_end once Finished

	start, deadline time.Time
	seat            int // current seat in the chain
	rows            int // rows written (attempt numbers count refusals too)
	// track is the job's books: spend, retry history, per-seat estimates,
	// fed from the rows as written, exactly as a replay of the log reads them.
	track admit.Track
	delay time.Duration // slept before the next row's attempt

	// the attempt in flight
	submit   time.Time
	spent    admit.Spent
	sendSeat int
	probe    bool // sent as a half-open breaker's probe
	// window is the retry budget's counts when it judged the attempt
	// (hasWindow), for its row.
	window    admit.BudgetWindow
	hasWindow bool
	prompt    int // index into the loop's prompts

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
	reserve []float64 // per prompt: USD a first attempt here reserves under a spend ceiling
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
	budget  *admit.RetryBudget // retry.budget: the retries of every job together
	idbuf   []byte
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
		width:  len(strconv.Itoa(max(c.Jobs, 1))),
		budget: admit.NewRetryBudget(c.Policy.Retry.Budget),
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
		reserve := make([]float64, len(l.prompts))
		if s.Config.Priced() && c.Policy.Budget.HasSpendCeiling() {
			for i, p := range l.prompts {
				reserve[i] = admit.Reservation(s.Config.Prices(),
					seat.PromptTokens(s.Config, seat.RequestText(p.prompt, p.messages)), int64(p.maxTokens))
			}
		}
		l.seats = append(l.seats, seatState{
			name: name, cfg: s.Config,
			seat: s.Seat, planner: s.Planner, reserve: reserve,
			br: admit.NewBreaker(c.Policy.Breaker, BreakerEvents(name, l.events)),
		})
	}
	return l, nil
}

// Breaker is the chain's i-th seat's breaker (for reports and tests).
func (l *Loop) Breaker(i int) *admit.Breaker { return l.seats[i].br }

// Start begins job k (1-based) at now: the deadline is made here, once.
func (l *Loop) Start(j *Job, k int, now time.Time) Action {
	free, track := j.free, j.track
	track.Reset() // a reused Job keeps its books' memory
	*j = Job{ID: l.jobID(k), start: now, deadline: now.Add(l.pol.Budget.Deadline), free: free,
		prompt: pickPrompt(l.order, l.seed, k, len(l.prompts)), track: track}
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
	st := &l.seats[j.seat]
	l.refusalRow(j, now, st, admit.Refuse(reasonCancelled), l.spent(j), j.delay)
	l.row.Outcome = admit.Cancelled
	l.row.Note = "stopped before this attempt"
	return l.finish(j, ledgerfile.JobCancelled)
}

// spent is the job's spend before its next attempt: the sums of its rows
// as written (spent_s is Σ delay_s + elapsed_s of its sent rows), so the
// gate decides on exactly the numbers a replay of the log reads. The
// real-time driver's own overhead between attempts is not charged to the
// job; the hard timeout still runs on the clock.
func (l *Loop) spent(j *Job) admit.Spent { return j.track.Spent() }

// before is the gate before the job's next attempt on seat st, after a
// backoff of delay: the sleep is charged to the deadline.
func (l *Loop) before(j *Job, st *seatState, delay time.Duration) admit.Decision {
	return j.track.Before(l.pol.Budget, st.name, admit.AddDuration(j.track.Spent().Time, delay), st.reserve[j.prompt])
}

// next runs the checks before an attempt: the breakers along the chain,
// then the gate with the conservative estimate for the seat it lands on.
func (l *Loop) next(j *Job, now time.Time) Action {
	j.hasWindow = false
	s := j.seat
	for s < len(l.seats) && !l.seats[s].br.Ready(now) {
		s++
	}
	if s == len(l.seats) {
		st := &l.seats[j.seat]
		l.refusalRow(j, now, st, admit.Refuse(admit.ReasonBreakerOpen), l.spent(j), j.delay)
		return l.finish(j, j.track.End())
	}
	j.seat = s
	st := &l.seats[s]
	spent := l.spent(j)
	if d := l.before(j, st, j.delay); !d.Admit {
		l.refusalRow(j, now, st, d, spent, j.delay)
		return l.finish(j, j.track.End())
	}
	hard := min(l.pol.Timeouts.Hard, j.deadline.Sub(now))
	if hard <= 0 {
		// Less than the log's resolution is left: the gate saw a
		// millisecond that the clock has already spent.
		l.refusalRow(j, now, st, admit.Refuse(admit.ReasonDeadline), spent, j.delay)
		return l.finish(j, j.track.End())
	}
	// Last, the retry budget: a retry everything else admits, when the
	// retries of every job are over it. A first attempt only counts.
	retry := j.rows > 0
	if l.pol.Retry.Budget.Enabled() && retry {
		var d admit.Decision
		d, j.window = l.budget.Decide(admit.Decision{Admit: true}, true, now)
		j.hasWindow = true
		if !d.Admit {
			l.refusalRow(j, now, st, d, spent, j.delay)
			return l.finish(j, j.track.End())
		}
	}
	l.budget.Sent(now, retry)
	j.probe = st.br.State(now) == admit.HalfOpen
	st.br.Allow(now)
	j.submit, j.spent, j.sendSeat = now, spent, s
	return Action{Kind: Send, Seat: s, Hard: hard, WaitCap: l.pol.Budget.MaxWait}
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
		Slow5xxAfter:   l.pol.Retry.SlowServerAfter,
	}
}

// Done takes the observation of the job's attempt in flight at now, writes
// its row, and applies the retry rules.
func (l *Loop) Done(j *Job, obs *seat.Observation, now time.Time) Action {
	st := &l.seats[j.sendSeat]
	if obs.Billing == "" {
		obs.Billing = admit.BillingOf(obs.Outcome, obs.Elapsed, l.pol.Retry.SlowServerAfter)
	}
	cost, priced := st.cfg.Cost(obs.Usage())

	note := RecordBreaker(st.br, now, obs, j.probe)
	l.sentRow(j, obs, st, cost, priced, note)
	j.hasWindow = false
	a := ledgerfile.AttemptOf(&l.row)
	j.track.Sent(&a)

	switch obs.Outcome {
	case admit.OK:
		return l.finish(j, ledgerfile.JobSucceeded)
	case admit.Cancelled:
		return l.finish(j, ledgerfile.JobCancelled)
	}
	step := j.track.Retry(l.pol.Retry, &a, l.rng)
	if !step.Retry {
		l.emit(j)
		l.refusalRow(j, now, st, admit.Refuse(step.Reason), l.spent(j), 0)
		return l.finish(j, j.track.End())
	}
	// The delay the gate charges is the sleep (the proxy's client, which
	// keeps its own clock, is charged at least the same: Charged).
	step.Delay = ledgerfile.Resolution(step.Charged(0))
	next := j.sendSeat
	if step.Fallback && next+1 < len(l.seats) {
		next++ // seed 001: retry a timeout at most once, and elsewhere
	}
	// Before sleeping: an attempt the gate must refuse after the sleep
	// (the cap is reached, or the sleep leaves too little of the deadline
	// for the estimate) is refused now, not after a pointless wait.
	if d := l.before(j, &l.seats[next], step.Delay); d.Final() {
		l.emit(j)
		// The row carries the sleep this refusal saved: the gate charged it.
		l.refusalRow(j, now, &l.seats[next], d, l.spent(j), step.Delay)
		if step.Delay > 0 {
			l.row.Note = JoinNote("refused before sleeping", l.row.Note)
		}
		return l.finish(j, j.track.End())
	}
	l.emit(j)
	j.seat = next
	j.delay = step.Delay
	if step.Delay <= 0 {
		return l.next(j, now)
	}
	return Action{Kind: Sleep, Sleep: step.Delay}
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
	j.rows++
	j.delay = 0
}

func (l *Loop) base(j *Job, ts time.Time, st *seatState, spent admit.Spent, delay time.Duration) RowBase {
	return RowBase{
		TS: ts, Job: j.ID, Attempt: j.rows + 1, Seat: st.name, Model: st.cfg.Model,
		Delay: delay, Spent: spent, Holdout: l.holdout, Fallback: st != &l.seats[0],
		PromptSHA: l.prompts[j.prompt].sha, Tags: l.prompts[j.prompt].tags, Reserve: st.reserve[j.prompt],
		Window: j.window, HasWindow: j.hasWindow,
	}
}

// refusalRow fills the row for an attempt refused before sending: its
// numbers are the estimate the gate saw.
func (l *Loop) refusalRow(j *Job, now time.Time, st *seatState, d admit.Decision, spent admit.Spent, delay time.Duration) {
	b := l.base(j, now, st, spent, delay)
	RefusalRow(&l.row, &b, &j.track, d)
}

// sentRow fills the row for an attempt that was sent.
func (l *Loop) sentRow(j *Job, o *seat.Observation, st *seatState, cost float64, priced bool, note string) {
	b := l.base(j, j.submit, st, j.spent, j.delay)
	SentRow(&l.row, &b, &j.track, o, cost, priced, note)
	PriceCache(&l.row, st.cfg, o)
}
