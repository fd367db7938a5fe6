package admit

import "time"

// BreakerConfig is the breaker section of a policy (seed 002).
type BreakerConfig struct {
	Window         time.Duration // rolling window the failure rate is measured over
	FailureRate    float64       // open when failures/requests in the window reach this (0..1]
	MinRequests    int           // never open on fewer requests than this in the window
	Cooldown       time.Duration // how long an open breaker refuses before half-opening
	HalfOpenProbes int           // trial requests let through while half-open
}

// Enabled reports whether the policy has a breaker at all.
func (c BreakerConfig) Enabled() bool { return c.FailureRate > 0 && c.Window > 0 }

// Validate names the key at fault.
func (c BreakerConfig) Validate() error {
	switch {
	case c.FailureRate < 0 || c.FailureRate > 1 || c.FailureRate != c.FailureRate:
		return KeyErrorf("breaker.failure_rate", "must be between 0 and 1, got %g", c.FailureRate)
	case c.Window < 0:
		return KeyErrorf("breaker.window", "must not be negative, got %s", c.Window)
	case c.Cooldown < 0:
		return KeyErrorf("breaker.cooldown", "must not be negative, got %s", c.Cooldown)
	case c.MinRequests < 0:
		return KeyErrorf("breaker.min_requests", "must not be negative, got %d", c.MinRequests)
	case c.HalfOpenProbes < 0:
		return KeyErrorf("breaker.half_open_probes", "must not be negative, got %d", c.HalfOpenProbes)
	}
	return nil
}

// BreakerState is closed, open or half-open.
type BreakerState int

const (
	Closed BreakerState = iota
	Open
	HalfOpen
)

func (s BreakerState) String() string {
	return [...]string{"closed", "open", "half-open"}[s]
}

// Breaker is a failure-rate circuit breaker over a rolling window. Time
// is passed in, never read, so the same breaker runs on the virtual clock.
// It is not safe for concurrent use; the attempt loop serialises calls.
type Breaker struct {
	cfg      BreakerConfig
	state    BreakerState
	openedAt time.Time
	probes   int // probes admitted while half-open
	probeOK  int // probes that succeeded
	// requests recorded while closed, in the window, failures marked
	window timeQueue
	// OpenFor accumulates how long the breaker has been open, for reports.
	openFor  time.Duration
	onChange func(at time.Time, from, to BreakerState)
}

// NewBreaker returns a closed breaker. onChange, if not nil, is told of
// every transition (seed 002: log every open/close).
func NewBreaker(cfg BreakerConfig, onChange func(at time.Time, from, to BreakerState)) *Breaker {
	if cfg.HalfOpenProbes <= 0 {
		cfg.HalfOpenProbes = 1
	}
	return &Breaker{cfg: cfg, onChange: onChange}
}

func (b *Breaker) set(now time.Time, s BreakerState) {
	if b.state == s {
		return
	}
	if b.state == Open {
		b.openFor += now.Sub(b.openedAt)
	}
	from := b.state
	b.state = s
	switch s {
	case Open:
		b.openedAt = now
	case HalfOpen:
		b.probes, b.probeOK = 0, 0
	case Closed:
		b.window.reset()
	}
	if b.onChange != nil {
		b.onChange(now, from, s)
	}
}

// State reports the state at now, moving open to half-open after the
// cooldown. A nil breaker (a seat with none) is always closed, as are the
// other methods' answers on one.
func (b *Breaker) State(now time.Time) BreakerState {
	if b == nil {
		return Closed
	}
	if b.state == Open && !now.Before(b.openedAt.Add(b.cfg.Cooldown)) {
		b.set(now, HalfOpen)
	}
	return b.state
}

// Allow reports whether a request may be sent at now. While half-open it
// lets through HalfOpenProbes requests and counts them.
func (b *Breaker) Allow(now time.Time) bool {
	if !b.Ready(now) {
		return false
	}
	if b != nil && b.state == HalfOpen {
		b.probes++
	}
	return true
}

// Ready reports whether Allow would let a request through at now, without
// counting a half-open probe. The attempt loop asks Ready before the gate
// and calls Allow only once the gate admits, so an attempt the gate
// refuses never uses up a probe (which would leave the breaker half-open
// with no probe ever recorded).
func (b *Breaker) Ready(now time.Time) bool {
	if b == nil || !b.cfg.Enabled() {
		return true
	}
	switch b.State(now) {
	case Open:
		return false
	case HalfOpen:
		return b.probes < b.cfg.HalfOpenProbes
	}
	return true
}

// Record tells the breaker how a request that Allow admitted ended.
func (b *Breaker) Record(now time.Time, failed bool) {
	if b == nil || !b.cfg.Enabled() {
		return
	}
	switch b.State(now) {
	case HalfOpen:
		if failed {
			b.set(now, Open)
			return
		}
		b.probeOK++
		if b.probeOK >= b.cfg.HalfOpenProbes {
			b.set(now, Closed)
		}
		return
	case Open:
		return // a straggler from before the breaker opened
	}
	cutoff := now.Add(-b.cfg.Window)
	b.window.push(now, cutoff, failed) // expired before it took now
	n := b.window.len()
	if n < b.cfg.MinRequests || n == 0 {
		return
	}
	if float64(b.window.marked)/float64(n) >= b.cfg.FailureRate {
		b.set(now, Open)
	}
}

// OpenTime is how long the breaker has been open up to now.
func (b *Breaker) OpenTime(now time.Time) time.Duration {
	d := b.openFor
	if b.state == Open {
		d += now.Sub(b.openedAt)
	}
	return d
}
