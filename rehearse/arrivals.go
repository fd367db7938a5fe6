package rehearse

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// Step is one stage of a rate ramp: Poisson arrivals at Rate jobs per
// second for For.
type Step struct {
	Rate float64
	For  time.Duration
}

// maxRate bounds an arrival rate: past a million jobs a second the gaps
// fall below the clock's resolution.
const maxRate = 1e6

// ParseRamp reads a ramp's rates, "1,2,4,8" or "1,2,4,8/s", each held for
// step. Errors name the offending rate; the caller names the flag.
func ParseRamp(s string, step time.Duration) ([]Step, error) {
	if step <= 0 {
		return nil, fmt.Errorf("each step must last a positive time, got %v", step)
	}
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "/s"))
	if s == "" {
		return nil, fmt.Errorf("no rates: give them as 1,2,4,8/s")
	}
	var out []Step
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		r, err := admit.ParseNumber(f)
		if err != nil || !(r > 0) || r > maxRate {
			return nil, fmt.Errorf("%q is not a rate in jobs per second (a number above 0, at most %g)", f, float64(maxRate))
		}
		out = append(out, Step{Rate: r, For: step})
	}
	return out, nil
}

// CheckRate refuses a rate that is not a positive finite number of jobs
// per second (0 means no rate).
func CheckRate(r float64) error {
	if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) || r > maxRate {
		return fmt.Errorf("must be a positive number of jobs per second (at most %g), got %g", float64(maxRate), r)
	}
	return nil
}

// arrivals is an open-loop arrival process: Poisson at rate, or through
// the steps of a ramp, until end (ns since the run's start; 0: no end).
// A Poisson process is memoryless, so at a step's boundary the next gap
// is drawn afresh at the new rate.
type arrivals struct {
	rate float64
	ramp []Step
	end  int64
}

func newArrivals(rate float64, ramp []Step, duration time.Duration) arrivals {
	a := arrivals{rate: rate, ramp: ramp, end: int64(max(duration, 0))}
	if len(ramp) > 0 {
		var total time.Duration
		for _, s := range ramp {
			total += s.For
		}
		if a.end == 0 || int64(total) < a.end {
			a.end = int64(total)
		}
	}
	return a
}

func (a *arrivals) open() bool { return a.rate > 0 || len(a.ramp) > 0 }

// rateAt is the rate at t and when that rate's stage ends (0: never).
func (a *arrivals) rateAt(t int64) (float64, int64) {
	if len(a.ramp) == 0 {
		return a.rate, 0
	}
	var at int64
	for _, s := range a.ramp {
		at += int64(s.For)
		if t < at {
			return s.Rate, at
		}
	}
	return 0, 0
}

// next is the arrival after one at t, drawn from rng; false once the
// process has ended.
func (a *arrivals) next(rng *rand.Rand, t int64) (int64, bool) {
	for {
		r, stageEnd := a.rateAt(t)
		if r <= 0 {
			return 0, false
		}
		gap := rng.ExpFloat64() / r * 1e9
		n := t + int64(min(gap, float64(math.MaxInt64/4)))
		if stageEnd > 0 && n >= stageEnd {
			t = stageEnd
			continue
		}
		if a.end > 0 && n >= a.end {
			return 0, false
		}
		return n, true
	}
}

// limit is the run's job count bound: Jobs, or no bound when the run is
// bounded by time (Duration, or a ramp's end) and Jobs is 0.
func limit(jobs int, a arrivals, duration time.Duration) int {
	if jobs == 0 && (duration > 0 || a.end > 0) {
		return math.MaxInt
	}
	return jobs
}

func checkLoad(jobs int, rate float64, ramp []Step, duration time.Duration) error {
	if jobs < 0 {
		return fmt.Errorf("jobs: must not be negative, got %d", jobs)
	}
	if err := CheckRate(rate); err != nil {
		return fmt.Errorf("rate: %v", err)
	}
	if duration < 0 {
		return fmt.Errorf("duration: must not be negative, got %v", duration)
	}
	if rate > 0 && len(ramp) > 0 {
		return fmt.Errorf("rate and ramp: give one or the other")
	}
	for _, s := range ramp {
		if err := CheckRate(s.Rate); err != nil || s.Rate == 0 || s.For <= 0 {
			return fmt.Errorf("ramp: each step needs a rate above 0 and a positive time, got %g for %v", s.Rate, s.For)
		}
	}
	return nil
}

// ArrivalStats is how well an open-loop run held its rate, as vegeta
// reports it: the rate asked for, the rate the seeded schedule drew, and
// the rate jobs actually started at.
type ArrivalStats struct {
	Target    float64       // jobs per second asked for (a ramp's mean over its steps)
	Scheduled float64       // the drawn schedule's rate over the window
	Achieved  float64       // started jobs per second over the window
	Started   int           // jobs started
	Window    time.Duration // first arrival to the run's end by time, or to the last arrival
	MaxLag    time.Duration // the latest any job started after its scheduled instant
	MeanLag   time.Duration
}

// Behind reports whether the client could not keep up: it started jobs
// more than 5% slower than its schedule. (A late wake-up that the next
// arrivals catch up on shows in MaxLag, not here.)
func (a ArrivalStats) Behind() bool {
	return a.Started > 1 && a.Achieved < 0.95*a.Scheduled
}

// targetRate is the mean rate asked for.
func targetRate(rate float64, ramp []Step) float64 {
	if len(ramp) == 0 {
		return rate
	}
	var n, t float64
	for _, s := range ramp {
		n += s.Rate * s.For.Seconds()
		t += s.For.Seconds()
	}
	return n / t
}

// perSecond is n events over w: over a time-bounded window n/w; over the
// span from the first event to the last, (n-1)/w (n events, n-1 gaps).
func perSecond(n int, w time.Duration, span bool) float64 {
	if span {
		n--
	}
	if n <= 0 || w <= 0 {
		return 0
	}
	return float64(n) / w.Seconds()
}
