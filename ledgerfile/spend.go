package ledgerfile

import (
	"time"

	"github.com/retrygate/retrygate/admit"
)

// This file is the gate over log rows: how a row becomes an attempt the
// gate's bookkeeping (admit.Track) takes, and how a job's rows are judged
// row by row. The attempt loop feeds its own rows through AttemptOf, and
// record, admit --log and every replay read rows through the same
// functions, so a log replayed under the policy that wrote it changes no
// decision.

// Gen is the row's first content byte → last byte: elapsed − wait. The
// hand-written form of a log (`wait_s=18.0 elapsed_s=9.0`) counted elapsed
// from the first byte, so an elapsed shorter than its wait is read as
// that form's generation time.
func (r *Row) Gen() time.Duration {
	if r.Elapsed < r.Wait {
		return r.Elapsed
	}
	return r.Elapsed - r.Wait
}

// AttemptOf is the attempt a sent row records, as admit.Track takes it.
func AttemptOf(r *Row) admit.Attempt {
	o := r.Outcome
	if o == "" {
		o = admit.OK // a hand-written row: an attempt that returned an answer
	}
	a := admit.Attempt{
		Seat: r.Seat, Outcome: o, Billing: r.Billing,
		Wait: r.Wait, Elapsed: r.Wait + r.Gen(), Delay: r.Delay,
		Tokens: r.Tokens, USD: r.CostUSD,
		RetryAfter: r.RetryAfter, HasRetryAfter: r.HasRetryAfter,
	}
	if r.HasSplit {
		a.Prompt, a.Completion = r.PromptTokens, r.CompletionTokens
	}
	a.ContextLength = o == admit.ClientError && admit.ContextLength(r.ErrorCode)
	switch o {
	case admit.OK, admit.Incomplete:
		a.Content = true
	case admit.Reset:
		a.Content = r.Wait > 0 // the loop writes wait 0 for a reset before content
	case admit.Timeout, admit.WaitCap, admit.Cancelled:
		a.Content = r.Wait < r.Elapsed // the loop writes wait = elapsed when no byte came
	}
	if a.Billing == "" {
		a.Billing = admit.BillingOf(o, a.Elapsed, 0)
	}
	return a
}

// AddSpent adds one sent row to a job's spend: admit.Spent.Add, the one
// spend accumulator, fed the attempt the row records (AttemptOf), as the
// loop, the replay and the summary feed it.
func AddSpent(s *admit.Spent, r *Row) {
	a := AttemptOf(r)
	s.Add(&a)
}

// JobSpend is what a job's rows, in file order, have spent: the gate's
// inputs for its next attempt. The rows may be the job's last rows only,
// starting at a row that carries the job's cumulative spend (spent_s,
// spent_tokens, spent_usd, used): the spend starts from that row's.
func JobSpend(rows []Row) admit.Spent {
	var g JobGate
	g.Books(Rules{}, rows)
	return g.m.Track().Spent()
}

// MaxBookRows is how far back a reader of one job's last rows goes for
// its books: a job's first row, or this many rows back, whichever comes
// first. Past it, the track starts from the spend that row carries, and
// the retry history and estimates from the rows read: exact for any job
// of up to this many rows, and a shell loop recording thousands of
// attempts of one job pays a bounded read per record, not a growing one.
const MaxBookRows = 64

// BookRows is ReadJobTail's stop rule for the gate's books (record and
// admit --log): it stops at the job's first row, or MaxBookRows back at a
// row that carries the job's spend before it. Each call makes a fresh rule.
func BookRows() func(*Row) bool {
	n := 0
	return func(r *Row) bool {
		n++
		first := r.Attempt == 1 || r.HasSpent && r.Used == 0 && r.SpentS == 0 && r.SpentTokens == 0
		return first || n >= MaxBookRows && r.HasSpent
	}
}

// Books takes a job's rows in file order into the gate's books: its spend,
// its retry history and its per-seat estimates. admit --log reads a job
// this way, then asks Next about its next attempt.
func (g *JobGate) Books(rules Rules, rows []Row) {
	for i := range rows {
		g.take(rules, &rows[i])
	}
}

// Estimate is the job's spend so far and the conservative estimate of its
// next attempt on seat (the seat of its last sent attempt when seat is "").
func (g *JobGate) Estimate(seat string) (admit.Spent, admit.Next) {
	t := g.m.Track()
	if seat == "" {
		seat = t.LastSeat()
	}
	return t.Spent(), t.Estimate(seat, 0)
}

// Next is the job machine's decision on the job's next attempt on seat
// after the rows taken (admit --log): the retry rules' refusal after its
// last sent failure, the gate on next (the estimate, or admit's flags),
// and the retry budget on window when it is set (a retry: the job has
// rows). It is the decision record writes and the loop makes there.
func (g *JobGate) Next(rules Rules, seat string, next admit.Next, window *admit.BudgetWindow) admit.Decision {
	if seat == "" {
		seat = g.m.Track().LastSeat()
	}
	r := Row{Seat: seat, Window: admit.BudgetWindow{}}
	if window != nil {
		r.Window, r.HasWindow = *window, true
	}
	ch := g.chain(rules, &r)
	// With a window the next attempt is a retry (the job has rows): the
	// retry budget judges it.
	p := g.m.Before(ch, admit.Ask{Estimate: &next, ClientRetry: window != nil})
	return p.Decision
}

// KeyClientRetry is the row key holding a proxied request's client retry
// counter (the official SDKs send X-Stainless-Retry-Count): a request
// naming no job that carries one is a retry, not a first attempt.
const KeyClientRetry = "client_retry"

// ClientRetry reports whether r records a client's retry (client_retry
// above 0).
func (r *Row) ClientRetry() bool {
	for _, kv := range r.Extra {
		if kv.Key == KeyClientRetry {
			return kv.Value != "" && kv.Value != "0"
		}
	}
	return false
}

// Rules are what a replay judges rows by: the budget and the retry rules.
type Rules struct {
	Budget admit.Budget
	Retry  admit.RetryPolicy
	// Window, when set, is the retry budget's window rebuilt from the rows
	// read so far (every job's), for a retry whose row carries no counts
	// of its own (a log written without a budget): see Budgeted.
	Window *admit.RetryBudget
	// Windows are the policy's seats' context windows by name: after a
	// context-length error, a row on a seat with a larger one is the
	// retry the policy allows.
	Windows map[string]int64
}

// Budgeted is the retry budget (retry.budget) on the decision d for r,
// checked last as the job machine checks it: a retry that everything else
// admits is refused when its window is over budget. The window is the
// counts the writer kept on the row (window_firsts, window_retries), so a
// log replayed under the policy that wrote it flips nothing; a row
// without them (written without a budget) is judged on rules.Window, the
// counts of the rows read before it. That is a counterfactual and an
// approximation: a row is written when its attempt ends, so the attempts
// in flight when the retry was decided may come after it in the log.
func (rules Rules) Budgeted(d admit.Decision, retry bool, r *Row) (admit.Decision, admit.BudgetWindow) {
	rb := rules.Retry.Budget
	if !rb.Enabled() || !retry || !d.Admit {
		return d, r.Window
	}
	w := r.Window
	if !r.HasWindow {
		if rules.Window == nil || r.TS.IsZero() {
			return d, w
		}
		w = rules.Window.Window(r.TS)
	}
	return rb.Apply(d, true, w), w
}

// Counted takes a sent row into rules.Window, when there is one.
func (rules Rules) Counted(r *Row) {
	if rules.Window != nil && r.WasSent() && !r.TS.IsZero() && r.Attempt > 0 {
		rules.Window.Sent(r.TS, r.Attempt >= 2 || r.ClientRetry())
	}
}

// rowBudget is the retry budget as one row recorded it, for the job
// machine (admit.RetryGate): a replay counts sends from the log itself
// (Rules.Counted), not from its own decisions.
type rowBudget struct {
	rules *Rules
	r     *Row
}

func (b *rowBudget) Decide(d admit.Decision, retry bool, _ time.Time) (admit.Decision, admit.BudgetWindow) {
	return b.rules.Budgeted(d, retry, b.r)
}

func (*rowBudget) Sent(time.Time, bool) {}

// JobGate replays one job's rows in file order through the job machine
// (admit.Job), making at each row the decision the attempt loop and the
// proxy made there: the retry rules after a failure (permanent error,
// retry limit), the gate on the job's spend and the row seat's estimate,
// with the wait before the attempt charged to the deadline (so a
// Retry-After past the deadline is refused before the sleep, as the loop
// does), the retry budget on the window the row recorded, and the wait
// cap enforced live on a sent row. The machine's chain is the row's seat
// alone: the rows say where each attempt went. A refusal does not remove
// the rows that follow it: each row is judged on what happened before it.
// A row decided while earlier attempts of its job were in flight (an
// older proxy's concurrent requests: its inflight key) is judged on the
// books without them, each counted as used with the estimate as spent, as
// that proxy decided it.
type JobGate struct {
	m     admit.Job
	sc    *GateScratch
	begun bool
	// restored: the job's earlier rows are not in the books (see start).
	restored bool
	// held are sent rows judged and not yet taken into the books, in
	// order: a later row may have been decided with them in flight.
	held []admit.Attempt
}

// GateScratch is the machine's chain for one row at a time: gates that
// judge one row at a time (a replay's jobs) share one, so a job's books
// are small.
type GateScratch struct {
	ch     admit.Chain
	seat   [1]admit.ChainSeat
	budget rowBudget
	rules  Rules
}

// Share makes g judge on sc (nil: a scratch of its own).
func (g *JobGate) Share(sc *GateScratch) { g.sc = sc }

// Reset empties the gate for another job's rows, keeping its room.
func (g *JobGate) Reset() {
	g.m.Reset()
	*g = JobGate{m: g.m, sc: g.sc, held: g.held[:0]}
}

// chain points the machine's chain at row r's seat under rules.
func (g *JobGate) chain(rules Rules, r *Row) *admit.Chain {
	if g.sc == nil {
		g.sc = new(GateScratch)
	}
	sc := g.sc
	sc.rules = rules
	sc.seat[0] = admit.ChainSeat{Name: r.Seat, Reserve: r.ReserveUSD, Window: rules.Windows[r.Seat]}
	sc.ch = admit.Chain{Budget: rules.Budget, Retry: rules.Retry, Seats: sc.seat[:]}
	if rules.Retry.Budget.Enabled() {
		sc.budget = rowBudget{rules: &sc.rules, r: r}
		sc.ch.RetryGate = &sc.budget
	}
	return &sc.ch
}

// settle takes the held attempts into the books until at most n remain:
// the ones a row decided with n attempts in flight did not see.
func (g *JobGate) settle(rules Rules, n int) {
	k := max(len(g.held)-n, 0)
	for i := range k {
		g.sent(rules, &g.held[i])
	}
	g.held = append(g.held[:0], g.held[k:]...)
}

// Judge returns the decision for r under rules, then takes r into the
// job's books. A row in the hand-written form (no outcome, no sent key) is
// judged on its own numbers, as the hand-written gate judged it.
// It returns the job's spend before r too.
func (g *JobGate) Judge(rules Rules, r *Row) (admit.Decision, admit.Spent) {
	g.start(r)
	g.settle(rules, r.InFlight)
	if !r.WasSent() {
		return g.decide(rules, r, nil)
	}
	a := AttemptOf(r) // once, for the decision and the books
	d, before := g.decide(rules, r, &a)
	g.held = append(g.held, a) // taken by the next row's settle
	return d, before
}

// start restores the books from the first row's recorded spend, when the
// job's earlier rows are not being read.
func (g *JobGate) start(r *Row) {
	if g.begun {
		return
	}
	g.begun = true
	if r.HasSpent && (r.Used > 0 || r.SpentS > 0 || r.SpentTokens > 0) {
		// The spend a row carries counts the attempts it was decided
		// with in flight; the replay counts those again (inflight).
		s := admit.Spent{Time: r.SpentS, Tokens: r.SpentTokens, Attempts: max(r.Used-r.InFlight, 0), USD: r.SpentUSD}
		g.m.Restore(s)
		g.restored = true
	}
}

func (g *JobGate) take(rules Rules, r *Row) {
	g.start(r)
	g.settle(rules, 0)
	if !r.WasSent() {
		return
	}
	a := AttemptOf(r)
	g.sent(rules, &a)
}

// sent takes the attempt a sent row records into the machine's books
// (admit.Job.Take): a success clears the retry rules; a cancelled attempt
// (its client hung up: the proxy's client may come back under the same
// job) leaves their last judgement as it was; any other failure is
// judged by them. The row that follows says what came next.
func (g *JobGate) sent(rules Rules, a *admit.Attempt) {
	r := Row{Seat: a.Seat}
	g.m.Take(g.chain(rules, &r), 0, a, nil)
}

// Decide is the decision for the job's next row r after its earlier rows
// (record's decision on the attempt it appends): the same judgement a
// replay makes of r.
func Decide(rules Rules, earlier []Row, r *Row) admit.Decision {
	var g JobGate
	g.Books(rules, earlier)
	d, _ := g.Judge(rules, r)
	return d
}

// decide is the decision for r and the spend it was made on; a is the
// attempt r records when it was sent (AttemptOf), nil when not.
func (g *JobGate) decide(rules Rules, r *Row, a *admit.Attempt) (admit.Decision, admit.Spent) {
	switch reason := admit.Reason(r.Reason()); {
	case !r.Admitted() && !r.WasSent() && (reason == admit.ReasonBreakerOpen || reason == "cancelled" || admit.BeforeBooks(reason)):
		// Other jobs' failures open a breaker, the operator stops a run,
		// and the proxy's limits refuse a request before its books: none
		// is this job's rows' to decide.
		return admit.Refuse(reason), g.m.Track().Spent()
	case !g.hasStep() && !r.WasSent() && (reason == admit.ReasonPermanentError || reason == admit.ReasonRetryLimit):
		// The failure the retry rules judged is not in the rows read
		// (a hand-written row, or the log starts mid-job): keep theirs.
		return admit.Refuse(reason), g.m.Track().Spent()
	}
	ch := g.chain(rules, r)
	g.m.Renumber(r.Attempt)
	ask := admit.Ask{Waited: r.Delay, Held: r.InFlight, ClientRetry: r.ClientRetry()}
	t := g.m.Track()
	switch {
	case r.Outcome == "" && !r.Unsent:
		// The hand-written form (no outcome, no sent key): its own
		// numbers were the gate's next attempt.
		ask.Estimate = &admit.Next{Wait: r.Wait, Gen: r.Gen(), Tokens: r.Tokens, USD: r.CostUSD}
	case g.restored && a == nil && !t.Observed(r.Seat):
		// The job's earlier rows are not in the books (a log read from
		// the middle, or a row of a job after the end that let its books
		// go): nothing is observed, and the refused row's numbers are
		// the estimate the gate saw.
		ask.Estimate = &admit.Next{Wait: r.Wait, Gen: r.Gen(), Tokens: r.Tokens, USD: r.ReserveUSD}
	}
	spent := t.Spent()
	p := g.m.Before(ch, ask)
	d := p.Decision
	if a != nil {
		d = admit.LiveWaitCap(rules.Budget, d, a)
	}
	if r.Outcome == "" && !r.Unsent {
		return d, spent
	}
	return d, p.Spent
}

func (g *JobGate) hasStep() bool {
	_, ok := g.m.Step()
	return ok
}
