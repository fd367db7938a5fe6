package admit

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Budget is the four numbers plus an optional spend ceiling.
type Budget struct {
	Deadline     time.Duration // wall clock for the whole job
	TokenCeiling int64         // prompt + completion across every attempt
	MaxAttempts  int           // attempts the job may send
	MaxWait      time.Duration // longest tolerated queue wait (submit → first byte)
	MaxSpendUSD  float64       // 0 means no spend ceiling
}

// HasSpendCeiling reports whether the budget caps spend in USD.
func (b Budget) HasSpendCeiling() bool { return b.MaxSpendUSD > 0 }

// Validate rejects budgets the gate cannot reason about. The error names
// the config key at fault.
func (b Budget) Validate() error {
	switch {
	case b.Deadline <= 0:
		return KeyErrorf("budget.deadline", "must be positive, got %s", b.Deadline)
	case b.TokenCeiling <= 0:
		return KeyErrorf("budget.token_ceiling", "must be positive, got %d", b.TokenCeiling)
	case b.MaxAttempts <= 0:
		return KeyErrorf("budget.max_attempts", "must be at least 1, got %d", b.MaxAttempts)
	case b.MaxWait <= 0:
		return KeyErrorf("budget.max_wait", "must be positive, got %s", b.MaxWait)
	case b.MaxSpendUSD < 0:
		return KeyErrorf("budget.max_spend_usd", "must not be negative, got %g", b.MaxSpendUSD)
	}
	return nil
}

// Spent is what a job has used before the next attempt: the gate's inputs.
type Spent struct {
	Time     time.Duration
	Tokens   int64
	Attempts int
	USD      float64
}

// Next is the next attempt's numbers; before it happens, a conservative
// estimate (Estimator). Its elapsed is Wait + Gen: elapsed holds its wait,
// so the deadline check adds the two once.
type Next struct {
	Wait   time.Duration // submit → first content byte
	Gen    time.Duration // first content byte → last byte (elapsed − wait)
	Tokens int64
	USD    float64
}

// Elapsed is the next attempt's submit → last byte: Wait + Gen.
func (n Next) Elapsed() time.Duration { return AddDuration(n.Wait, n.Gen) }

// Reason says why an attempt was refused. Its string is part of the
// printed decision and of rehearsal.log, so the values never change.
type Reason string

const (
	ReasonAttemptCap     Reason = "attempt cap"
	ReasonQueueWait      Reason = "queue wait"
	ReasonDeadline       Reason = "deadline"
	ReasonTokenCeiling   Reason = "token ceiling"
	ReasonSpendCeiling   Reason = "spend ceiling"
	ReasonPermanentError Reason = "permanent error"
	ReasonRetryLimit     Reason = "retry limit" // the failure class has used its retries
	ReasonBreakerOpen    Reason = "breaker open"
)

// Refusals the proxy makes of a request before any job's books are read
// (its limits and malformed requests: docs/proxy.md). No budget decides
// them, so a replay keeps them; they are not in Reasons (report's wide
// output counts them under refused_other).
const (
	ReasonProxyBusy  Reason = "proxy busy"  // --max-concurrent, --max-body-total
	ReasonTooLarge   Reason = "too large"   // --max-body
	ReasonBadRequest Reason = "bad request" // a body or header the proxy cannot take
)

// BeforeBooks reports whether r is a refusal made before any job's books
// were read (ReasonProxyBusy, ReasonTooLarge, ReasonBadRequest).
func BeforeBooks(r Reason) bool {
	return r == ReasonProxyBusy || r == ReasonTooLarge || r == ReasonBadRequest
}

// Reasons lists every refusal reason, gate checks first in gate order.
var Reasons = []Reason{
	ReasonAttemptCap, ReasonQueueWait, ReasonDeadline, ReasonTokenCeiling,
	ReasonSpendCeiling, ReasonPermanentError, ReasonRetryLimit, ReasonBreakerOpen,
	ReasonRetryBudget,
}

// Remaining is what the budget has left after the spend, before the next
// attempt. It is never negative: a job past its budget (a log that
// recorded attempts past the cap) has nothing left, not less.
type Remaining struct {
	Time     time.Duration
	Tokens   int64
	Attempts int
	USD      float64 // meaningful only with a spend ceiling
}

// Decision is the gate's answer. Reason is the first failing check;
// Failing lists every failing check in gate order (Failing[0] == Reason).
type Decision struct {
	Admit     bool
	Reason    Reason
	Failing   []Reason
	Remaining Remaining
}

// String is the printed form: exactly "admit" or "refuse: <reason>".
func (d Decision) String() string {
	if d.Admit {
		return "admit"
	}
	if s, ok := refusals[d.Reason]; ok {
		return s // no allocation on the simulator's hot path
	}
	return "refuse: " + string(d.Reason)
}

var refusals = func() map[Reason]string {
	m := map[Reason]string{}
	for _, r := range Reasons {
		m[r] = "refuse: " + string(r)
	}
	return m
}()

// Refuse builds a refusal that did not come from the gate's checks
// (permanent error, retry limit, breaker open).
func Refuse(r Reason) Decision {
	return Decision{Reason: r, Failing: []Reason{r}}
}

// RefuseFirst is a refusal by a rule checked before the gate (the retry
// rules: permanent error, retry limit), with the gate's own decision on
// the same numbers kept beside it: its failing checks are listed after
// the rule's reason, and what the budget has left is the gate's.
func RefuseFirst(r Reason, gate Decision) Decision {
	failing := make([]Reason, 0, 1+len(gate.Failing))
	failing = append(append(failing, r), gate.Failing...)
	return Decision{Reason: r, Failing: failing, Remaining: gate.Remaining}
}

// Decide is the gate. Checks run in DESIGN.md's order; every comparison
// is strict, so spending exactly the budget admits. Sums saturate
// (limits.go), so no input, however large, wraps into an admit. With no
// time left at all nothing is admitted, not even an estimate of zero: an
// attempt needs some of the deadline to run in.
func Decide(b Budget, s Spent, n Next) Decision {
	rem := Remaining{
		Time:     max(b.Deadline-ClampDuration(s.Time), 0),
		Tokens:   max(b.TokenCeiling-ClampTokens(s.Tokens), 0),
		Attempts: max(b.MaxAttempts-s.Attempts, 0),
		USD:      max(b.MaxSpendUSD-ClampUSD(s.USD), 0),
	}
	var failing []Reason
	if s.Attempts >= b.MaxAttempts {
		failing = append(failing, ReasonAttemptCap)
	}
	if n.Wait > b.MaxWait {
		failing = append(failing, ReasonQueueWait)
	}
	if n.Elapsed() > rem.Time || rem.Time <= 0 {
		failing = append(failing, ReasonDeadline)
	}
	if AddTokens(s.Tokens, n.Tokens) > b.TokenCeiling {
		failing = append(failing, ReasonTokenCeiling)
	}
	if b.HasSpendCeiling() && AddUSD(s.USD, n.USD) > b.MaxSpendUSD+usdEpsilon {
		failing = append(failing, ReasonSpendCeiling)
	}
	if len(failing) == 0 {
		return Decision{Admit: true, Remaining: rem}
	}
	return Decision{Reason: failing[0], Failing: failing, Remaining: rem}
}

// Final reports whether a refusal is one no waiting can undo: the attempt
// cap, or too little of the deadline for the estimate. The loop refuses
// such an attempt before its backoff, and the proxy ends the job.
func (d Decision) Final() bool {
	return !d.Admit && (d.Failing[0] == ReasonAttemptCap || slices.Contains(d.Failing, ReasonDeadline))
}

// usdEpsilon absorbs float rounding so that spending exactly the ceiling
// (0.07 + 0.03 against 0.10) admits, as equality must.
const usdEpsilon = 1e-12

// ParseDecision reads a printed decision back. It accepts exactly the
// strings Decision.String produces, with any reason string after
// "refuse: " (unknown reasons are kept, for forward compatibility).
func ParseDecision(s string) (Decision, error) {
	if s == "admit" {
		return Decision{Admit: true}, nil
	}
	r, ok := strings.CutPrefix(s, "refuse: ")
	if !ok || strings.TrimSpace(r) == "" {
		return Decision{}, fmt.Errorf("not a decision %q (want \"admit\" or \"refuse: <reason>\")", s)
	}
	return Refuse(Reason(r)), nil
}
