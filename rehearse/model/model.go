package model

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/script"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// Model is a latency model: what a provider does on each call.
type Model interface {
	// Planner is the model played by one seat. Seats with different
	// indexes draw independent streams from the same seed.
	Planner(seed uint64, seatIndex int) seat.Planner
	// String is the model in canonical form; parsing it gives the same model.
	String() string
}

// maxSpec bounds a model's text. Its drawn numbers are bounded by
// admit.MaxStep, MaxStepTokens and MaxTokenRate, as a script's are.
const maxSpec = 4096

// Error is a bad model: the term at fault, when there is one, and why.
type Error struct {
	Term string // the term as written, e.g. "p50=abc"; "" for the model as a whole
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Term == "" {
		return e.Msg
	}
	return fmt.Sprintf("term %q: %s", e.Term, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Parse reads a model. log: and script: models read their file now, so a
// bad file is reported before any simulation starts.
func Parse(spec string) (Model, error) {
	spec = strings.TrimSpace(spec)
	switch {
	case strings.HasPrefix(spec, "log:"):
		return loadLog(strings.TrimPrefix(spec, "log:"))
	case strings.HasPrefix(spec, "script:"):
		path := strings.TrimPrefix(spec, "script:")
		if path == "" {
			return nil, &Error{Msg: "script: needs a file (script:FILE)"}
		}
		s, err := script.Open(path)
		if err != nil {
			return nil, err
		}
		return &Script{Path: path, S: s}, nil
	}
	return ParseParametric(spec)
}

// Script is a script seat's steps played in order: the same on every
// seat and for every seed, exactly as `retrygate rehearse` plays it.
type Script struct {
	Path string
	S    *script.Script
}

func (m *Script) Planner(uint64, int) seat.Planner { return m.S }
func (m *Script) String() string                   { return "script:" + m.Path }

// Kind of parametric model.
const (
	Lognormal = "lognormal"
	Fixed     = "fixed"
)

// Parametric is a lognormal or fixed model with its failure shares.
// Shares are fractions in [0, 1].
type Parametric struct {
	Kind string

	P50       time.Duration // lognormal median of elapsed
	Tail      time.Duration // the tail quantile's value
	TailQ     string        // "p90", "p95", "p99" or "p999"
	Elapsed   time.Duration // fixed
	TTFB      time.Duration // ttft as a duration, when TTFBShare < 0
	TTFBShare float64       // ttft as a share of elapsed; < 0 when a duration

	Tokens    int64
	HasTokens bool
	Prompt    int64
	Rate      float64 // completion tokens per second; 0 when not given

	// Failures are the failure shares, in failureKeys' order.
	Failures [len(failureKeys)]float64

	RetryAfter    time.Duration
	HasRetryAfter bool
	FastAfter     time.Duration
	SlowAfter     time.Duration
	// Slots > 0 is a seat that serves that many calls at once at full
	// speed: with busy calls in flight past it, an answered call's wait
	// and elapsed stretch by busy/Slots (its share of the seat).
	Slots int64

	sigma float64 // lognormal: ln(tail/p50)/z
}

// tailZ is the standard normal quantile of each tail key.
var tailZ = map[string]float64{
	"p90":  1.2815515655446004,
	"p95":  1.6448536269514722,
	"p99":  2.3263478740408408,
	"p999": 3.090232306167813,
}

// termOrder is the canonical order of terms in String, and the list of
// known keys in error messages.
var termOrder = []string{
	"p50", "p90", "p95", "p99", "p999", "elapsed", "ttft", "tokens", "prompt", "rate",
	"hang", "conn", "429", "5xx", "slow5xx", "4xx", "reset",
	"retry_after", "fast", "slow", "slots",
}

// failureKeys are the failure shares, in the order a draw walks them.
var failureKeys = [...]string{"hang", "conn", "429", "5xx", "slow5xx", "4xx", "reset"}

// ParseParametric reads `KIND key=value …`.
func ParseParametric(spec string) (*Parametric, error) {
	if len(spec) > maxSpec {
		return nil, &Error{Msg: fmt.Sprintf("model is %d bytes long (at most %d)", len(spec), maxSpec)}
	}
	fields := strings.Fields(spec)
	if len(fields) == 0 {
		return nil, &Error{Msg: "empty model (want e.g. \"lognormal p50=2.1s p99=14s\", log:FILE or script:FILE)"}
	}
	m := &Parametric{
		Kind: fields[0], TTFBShare: 0.25,
		FastAfter: 200 * time.Millisecond, SlowAfter: 30 * time.Second,
	}
	switch m.Kind {
	case Lognormal, Fixed:
	default:
		if strings.Contains(m.Kind, "=") {
			return nil, &Error{Term: m.Kind, Msg: "the model starts with its kind: lognormal or fixed (or log:FILE, script:FILE)"}
		}
		return nil, &Error{Term: m.Kind, Msg: "unknown model kind (want lognormal, fixed, log:FILE or script:FILE)"}
	}
	seen := map[string]bool{}
	for _, term := range fields[1:] {
		key, val, ok := strings.Cut(term, "=")
		if !ok || val == "" {
			return nil, &Error{Term: term, Msg: "want key=value"}
		}
		key = strings.ToLower(key)
		if !slices.Contains(termOrder, key) {
			return nil, &Error{Term: term, Msg: "unknown key " + strconv.Quote(key) + " (want one of " + strings.Join(termOrder, ", ") + ")"}
		}
		if seen[key] {
			return nil, &Error{Term: term, Msg: "given twice"}
		}
		seen[key] = true
		if err := m.set(key, val); err != nil {
			return nil, &Error{Term: term, Msg: err.Error()}
		}
	}
	if err := m.check(seen); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Parametric) set(key, val string) error {
	var err error
	switch key {
	case "p50":
		m.P50, err = duration(val, true)
	case "p90", "p95", "p99", "p999":
		m.TailQ = key
		m.Tail, err = duration(val, true)
	case "elapsed":
		m.Elapsed, err = duration(val, false)
	case "ttft":
		if strings.HasSuffix(val, "%") {
			m.TTFBShare, err = admit.ParseRate(val)
		} else {
			m.TTFBShare = -1
			m.TTFB, err = duration(val, false)
		}
	case "tokens":
		m.Tokens, err = count(val)
		m.HasTokens = true
	case "prompt":
		m.Prompt, err = count(val)
	case "rate":
		m.Rate, err = admit.ParseNumber(val)
		if err == nil && (m.Rate <= 0 || m.Rate > admit.MaxTokenRate) {
			err = fmt.Errorf("tokens per second must be above 0 and at most %g", admit.MaxTokenRate)
		}
	case "retry_after":
		m.RetryAfter, err = duration(val, false)
		m.HasRetryAfter = true
	case "fast":
		m.FastAfter, err = duration(val, false)
	case "slow":
		m.SlowAfter, err = duration(val, false)
	case "slots":
		m.Slots, err = count(val)
		if err == nil && (m.Slots < 1 || m.Slots > 1<<20) {
			err = fmt.Errorf("slots must be between 1 and %d", 1<<20)
		}
	default: // a failure share
		m.Failures[slices.Index(failureKeys[:], key)], err = admit.ParseRate(val)
	}
	return err
}

// failureSum is the failure shares added up.
func (m *Parametric) failureSum() float64 {
	sum := 0.0
	for _, p := range m.Failures {
		sum += p
	}
	return sum
}

func (m *Parametric) check(seen map[string]bool) error {
	switch m.Kind {
	case Lognormal:
		if seen["elapsed"] {
			return &Error{Term: "elapsed=" + m.Elapsed.String(), Msg: "is for fixed models; a lognormal takes p50 and a tail quantile"}
		}
		if !seen["p50"] || m.TailQ == "" {
			return &Error{Msg: "lognormal needs p50= and one tail quantile (p90=, p95=, p99= or p999=)"}
		}
		n := 0
		for q := range tailZ {
			if seen[q] {
				n++
			}
		}
		if n > 1 {
			return &Error{Msg: "lognormal takes one tail quantile (p90=, p95=, p99= or p999=), not several"}
		}
		if m.Tail < m.P50 {
			return &Error{Term: m.TailQ + "=" + m.Tail.String(), Msg: "is below p50=" + m.P50.String()}
		}
		m.sigma = math.Log(float64(m.Tail)/float64(m.P50)) / tailZ[m.TailQ]
	case Fixed:
		for _, k := range []string{"p50", "p90", "p95", "p99", "p999"} {
			if seen[k] {
				return &Error{Msg: "fixed takes elapsed=, not " + k + "= (use lognormal for a distribution)"}
			}
		}
		if !seen["elapsed"] {
			return &Error{Msg: "fixed needs elapsed="}
		}
	}
	if seen["rate"] && seen["tokens"] {
		return &Error{Msg: "give tokens= or rate=, not both (rate derives the completion tokens from the stream's length)"}
	}
	if seen["tokens"] && m.Prompt > m.Tokens {
		return &Error{Term: "prompt=" + strconv.FormatInt(m.Prompt, 10), Msg: "is more than tokens=" + strconv.FormatInt(m.Tokens, 10) + " (tokens counts prompt + completion)"}
	}
	if sum := m.failureSum(); sum > 1+1e-9 {
		return &Error{Msg: fmt.Sprintf("failure shares add up to %s, more than 100%%", strconv.FormatFloat(sum*100, 'g', 6, 64)+"%")}
	}
	return nil
}

// String is the canonical form: kind, then terms in a fixed order.
func (m *Parametric) String() string {
	terms := []string{m.Kind}
	term := func(k, v string) { terms = append(terms, k+"="+v) }
	if m.Kind == Lognormal {
		term("p50", m.P50.String())
		term(m.TailQ, m.Tail.String())
	} else {
		term("elapsed", m.Elapsed.String())
	}
	if m.TTFBShare < 0 {
		term("ttft", m.TTFB.String())
	} else if m.TTFBShare != 0.25 {
		term("ttft", fmtShare(m.TTFBShare))
	}
	if m.HasTokens {
		term("tokens", strconv.FormatInt(m.Tokens, 10))
	}
	if m.Prompt != 0 {
		term("prompt", strconv.FormatInt(m.Prompt, 10))
	}
	if m.Rate != 0 {
		term("rate", strconv.FormatFloat(m.Rate, 'g', -1, 64))
	}
	for i, k := range failureKeys {
		if p := m.Failures[i]; p != 0 {
			term(k, fmtShare(p))
		}
	}
	if m.HasRetryAfter {
		term("retry_after", m.RetryAfter.String())
	}
	if m.FastAfter != 200*time.Millisecond {
		term("fast", m.FastAfter.String())
	}
	if m.SlowAfter != 30*time.Second {
		term("slow", m.SlowAfter.String())
	}
	if m.Slots > 0 {
		term("slots", strconv.FormatInt(m.Slots, 10))
	}
	return strings.Join(terms, " ")
}

// FailureShare is the share of calls that fail in the model by itself,
// before any timeout (hang, conn, 429, 5xx, slow5xx, 4xx and reset).
func (m *Parametric) FailureShare() float64 { return min(m.failureSum(), 1) }

// fmtShare writes a fraction as a percentage that parses back to the same
// fraction.
func fmtShare(p float64) string {
	s := strconv.FormatFloat(p*100, 'g', -1, 64) + "%"
	if back, err := admit.ParseRate(s); err == nil && back == p {
		return s
	}
	return strconv.FormatFloat(p, 'g', -1, 64)
}

func duration(s string, positive bool) (time.Duration, error) {
	d, err := admit.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d > admit.MaxStep {
		return 0, fmt.Errorf("%s is past a model's limit of %s per attempt", d, admit.MaxStep)
	}
	if positive && d <= 0 {
		return 0, fmt.Errorf("must be positive")
	}
	return d, nil
}

// count is admit's count, at most admit.MaxStepTokens.
func count(s string) (int64, error) {
	n, err := admit.ParseCount(s)
	if err == nil && n > admit.MaxStepTokens {
		return 0, fmt.Errorf("count over %d %q", admit.MaxStepTokens, s)
	}
	return n, err
}
