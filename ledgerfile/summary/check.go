package summary

import (
	"errors"
	"math"
	"math/big"
	"slices"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// Threshold is one parsed threshold and where the policy wrote it.
type Threshold struct {
	admit.Threshold
	Where string
}

// ThresholdResult is one threshold's verdict.
type ThresholdResult struct {
	Metric      string   `json:"metric"`
	Threshold   string   `json:"threshold"`
	Aggregation string   `json:"aggregation"`
	Observed    *float64 `json:"observed"` // null when there was nothing to measure
	Limit       float64  `json:"limit"`
	Op          string   `json:"op"`
	N           int64    `json:"n"` // values or population the figure rests on
	Pass        bool     `json:"pass"`
	Where       string   `json:"where"`
	Note        string   `json:"note,omitempty"`

	// Value is the observed figure as computed: NaN with nothing to
	// measure, +Inf for attempts per success with no success.
	Value float64         `json:"-"`
	Spec  admit.Threshold `json:"-"`
}

// HeldOut is the verdict on the rows kept out of tuning (holdout=true):
// any of them the budget refuses fails the check (seed 003: believe the
// refusal).
type HeldOut struct {
	Rows    int64      `json:"rows"`
	Refused []Replayed `json:"refused"`
}

// judge takes one held-out row's replay.
func (h *HeldOut) judge(res Replayed) {
	h.Rows++
	if res.Refused() {
		h.Refused = append(h.Refused, res)
	}
}

// Agree reports whether the budget admits every held-out row.
func (h *HeldOut) Agree() bool { return len(h.Refused) == 0 }

// ReplayHeldOut replays rows (held out of a tuning, in log order) under b
// and the retry rules r.
func ReplayHeldOut(b admit.Budget, r admit.RetryPolicy, rows []ledgerfile.Row, files []string) HeldOut {
	rp := NewReplayer(b, r)
	h := HeldOut{Refused: []Replayed{}}
	for i := range rows {
		h.judge(rp.Add(&rows[i], files[i]))
	}
	return h
}

// CheckOptions are what a check judges logs against.
type CheckOptions struct {
	Budget     admit.Budget
	Retry      admit.RetryPolicy // the retry rules the replay judges by
	Thresholds []Threshold
	SlowAfter  time.Duration
	// Windows are the policy's seats' context windows by name (the
	// replay's rule for a retry after a context-length error).
	Windows map[string]int64
	// MaxListed bounds the decision changes kept for printing; the count
	// is always exact. 0 keeps 1000.
	MaxListed int
}

// ErrNoThresholds is a policy that gives check nothing to judge: a gate
// that checks nothing fails closed.
var ErrNoThresholds = errors.New("no thresholds: a check that judges nothing cannot pass (add thresholds: to the policy)")

// Check replays every row under a policy's budget and judges the rows
// not held out against its thresholds, one row at a time (Add, then
// Close).
type Check struct {
	opts CheckOptions
	rp   *Replayer
	sum  *Summarizer
	res  CheckResult
}

// CheckResult is a check's verdict and everything it rests on.
type CheckResult struct {
	Pass bool `json:"pass"`
	// Summary is the summary the thresholds read: only what they read is
	// counted (Options.OnlyGroups), and its streaming figures (Stream)
	// only when a threshold reads one (StreamMetric).
	Summary      *Summary          `json:"-"`
	Judged       int64             `json:"rows"`
	Thresholds   []ThresholdResult `json:"thresholds"`
	Failed       int               `json:"thresholds_failed"`
	ChangesTotal int64             `json:"changes_total"`
	Changes      []Replayed        `json:"changes"`
	HeldOut      HeldOut           `json:"held_out"`
	Goodput      Goodput           `json:"goodput"`
	// Shadow is what enforcing would change, on a shadow proxy's rows
	// (would=); nil when no row carries would=.
	Shadow *Shadow `json:"shadow,omitempty"`
}

// NewCheck starts a check; a policy without thresholds is ErrNoThresholds.
func NewCheck(opts CheckOptions) (*Check, error) {
	if len(opts.Thresholds) == 0 {
		return nil, ErrNoThresholds
	}
	if opts.MaxListed <= 0 {
		opts.MaxListed = 1000
	}
	return &Check{
		opts: opts,
		rp:   NewReplayer(opts.Budget, opts.Retry).WithWindows(opts.Windows),
		sum: New(Options{By: BySeat, SlowAfter: opts.SlowAfter, Deadline: opts.Budget.Deadline, OnlyGroups: true,
			NoStream: !slices.ContainsFunc(opts.Thresholds, func(t Threshold) bool { return StreamMetric(t.Metric) }),
			Goodput:  true, Thresholds: opts.Thresholds}),
		res: CheckResult{Changes: []Replayed{}, HeldOut: HeldOut{Refused: []Replayed{}}},
	}, nil
}

// Add replays one row (in log order) and counts it.
func (c *Check) Add(r *ledgerfile.Row, file string) {
	if r.Would != "" {
		if c.res.Shadow == nil {
			c.res.Shadow = &Shadow{Refused: []ReasonCount{}}
		}
		c.res.Shadow.add(r, file, c.opts.Budget.Deadline)
	}
	d, before := c.rp.judge(r)
	now, logged := d.String(), LoggedDecision(r)
	changed := (logged == admitted) != (now == admitted) // Replayed.Changed
	if changed {
		c.res.ChangesTotal++
	}
	// The row's whole replay is written out only where it is kept: a
	// listed change, or a held-out row.
	list := changed && len(c.res.Changes) < c.opts.MaxListed
	if list || r.Holdout {
		res := replayed(r, file, d, before, logged)
		if list {
			c.res.Changes = append(c.res.Changes, res)
		}
		if r.Holdout {
			c.res.HeldOut.judge(res)
			return
		}
	}
	c.sum.add(r, file, now, Refused(r, now))
}

// Close judges the thresholds. The check passes when every threshold
// passes and the budget admits every held-out row.
func (c *Check) Close() *CheckResult {
	s := c.sum.Close()
	c.res.Summary, c.res.Judged = s, s.Rows
	c.res.Goodput = *s.Goodput
	c.res.Thresholds = Evaluate(c.opts.Thresholds, s)
	for _, t := range c.res.Thresholds {
		if !t.Pass {
			c.res.Failed++
		}
	}
	if c.res.Shadow != nil {
		c.res.Shadow.close()
	}
	c.res.Pass = len(c.res.Thresholds) > 0 && c.res.Failed == 0 && c.res.HeldOut.Agree()
	return &c.res
}

// Observed is what a threshold metric measured over a summary, and how
// many values or members of the population it rests on.
func (s *Summary) Observed(metric string) (admit.Observed, int64) {
	all := s.All
	switch metric {
	case "wait_s":
		return admit.Observed{Values: all.Wait.Values}, all.Wait.N
	case "ttfb_s":
		return admit.Observed{Values: all.TTFB.Values}, all.TTFB.N
	case "elapsed_s":
		return admit.Observed{Values: all.Elapsed.Values}, all.Elapsed.N
	case "tokens":
		return admit.Observed{Values: all.Tokens.Values}, all.Tokens.N
	case "attempts_per_success":
		return admit.Observed{Value: float64(all.AttemptsPerSuccess), Exact: exactRatio(all.Attempts, all.Succeeded)}, all.Succeeded
	case "retry_ratio":
		return admit.Observed{Value: float64(all.RetryRatio), Exact: exactRatio(all.Attempts, all.Jobs)}, all.Jobs
	case "retry_tax":
		return admit.Observed{Value: float64(all.RetryTax.TokensShare), Exact: exactRatio(all.RetryTax.Tokens, all.TokensTotal),
			Saturated: all.Saturated}, all.Attempts
	case "refused_rate":
		return admit.Observed{Num: s.RefusedRows, Den: s.Rows}, s.Rows
	case "retry_budget_refusals":
		return admit.Observed{Num: s.BudgetRefused, Den: s.Rows}, s.Rows
	case "unknown_rate":
		return admit.Observed{Num: all.Unknown, Den: all.Jobs}, all.Jobs
	case "deadline_miss_rate":
		return admit.Observed{Num: s.Jobs.DeadlineMisses, Den: s.Jobs.Jobs}, s.Jobs.Jobs
	case "tpot_s":
		return admit.Observed{Values: s.Stream.TPOT.Values}, s.Stream.TPOT.N
	case "output_tps":
		return admit.Observed{Values: s.Stream.OutputTPS.Values}, s.Stream.OutputTPS.N
	case "itl_s":
		return admit.Observed{Values: s.Stream.ITL.Values}, s.Stream.ITL.N
	case "goodput":
		if s.Goodput == nil {
			return admit.Observed{Value: math.NaN()}, 0
		}
		// Good jobs per second of the window, exactly: good × 10^9 ÷ its nanoseconds.
		var exact *big.Rat
		if w := int64(s.Goodput.Window); w > 0 {
			exact = new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(s.Goodput.Good), big.NewInt(1e9)), big.NewInt(w))
		}
		return admit.Observed{Value: float64(s.Goodput.PerSecond), Exact: exact}, s.Goodput.Jobs
	case "billable_failure_rate":
		return admit.Observed{Num: all.BilledFailures, Den: all.FailedAttempts}, all.FailedAttempts
	case "cache_write_rate_on_retries":
		return admit.Observed{Num: all.Cache.Rewritten, Den: all.Cache.Retries}, all.Cache.Retries
	case "cached_share":
		return admit.Observed{Value: float64(all.Cache.CachedShare), Exact: exactRatio(all.Cache.CachedTokens, all.Cache.cachedOf),
			Saturated: all.Cache.saturated}, all.Cache.CachedTokens
	case "reasoning_share":
		return admit.Observed{Value: float64(all.Cache.ReasoningShare), Exact: exactRatio(all.Cache.ReasoningTokens, all.Cache.reasoningOf),
			Saturated: all.Cache.saturated}, all.Cache.ReasoningTokens
	}
	return admit.Observed{Value: math.NaN()}, 0
}

// exactRatio is num ÷ den exactly, nil when den is 0 (the figure is then
// NaN or infinite, and its double says so).
func exactRatio(num, den int64) *big.Rat {
	if den == 0 {
		return nil
	}
	return big.NewRat(num, den)
}

// StreamMetric reports whether a threshold metric reads the summary's
// streaming figures (Stream), which Options.NoStream leaves uncounted.
func StreamMetric(metric string) bool {
	switch metric {
	case "tpot_s", "output_tps", "itl_s":
		return true
	}
	return false
}

// Evaluate judges each threshold over s.
func Evaluate(ts []Threshold, s *Summary) []ThresholdResult {
	out := make([]ThresholdResult, 0, len(ts))
	for _, t := range ts {
		o, n := s.Observed(t.Metric)
		v, pass := t.Eval(o)
		r := ThresholdResult{Metric: t.Metric, Threshold: t.String(), Aggregation: t.Label(), Limit: t.Value, Op: t.Op,
			N: n, Pass: pass, Where: t.Where, Value: v, Spec: t.Threshold}
		if t.Agg == admit.AggCount {
			r.N = int64(v)
		}
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			r.Observed = &v
		}
		switch {
		case math.IsNaN(v):
			r.Note = "no data: nothing to measure, so it cannot pass"
		case math.IsInf(v, 1):
			r.Note = "no job succeeded"
		}
		out = append(out, r)
	}
	return out
}

// EndLog says the log being read has ended (Summarizer.EndLog): a job id
// that comes again is a job of the next log.
func (c *Check) EndLog() { c.sum.EndLog() }
