package admit

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Thresholds are the CI gate's pass/fail lines, in k6's grammar: per
// metric a list of `agg op value`, e.g. wait_s: ["p(95) < 5s"]. Unlike
// k6, a bare time value means seconds (as everywhere in retrygate), and a
// metric that is one number over the whole log takes no aggregation.
// Anything unknown — metric, aggregation, operator, unit — is an error
// that names it: a typo must never pass as a threshold that cannot fail.

// MetricKind says what shape of figure a metric is, and so which
// aggregations apply to it.
type MetricKind int

const (
	// TrendMetric is one value per sent attempt: avg min max med p(N) count.
	TrendMetric MetricKind = iota
	// RateMetric is a share of a population: rate (a fraction) and count
	// (how many matched).
	RateMetric
	// ValueMetric is a single number over the whole log: value, or no
	// aggregation at all ("< 1.5").
	ValueMetric
)

// MetricSpec describes one threshold metric.
type MetricSpec struct {
	Name    string
	Kind    MetricKind
	Time    bool // values are seconds: the units ms, s, m apply
	Percent bool // values are fractions: the unit % applies (5% = 0.05)
	Doc     string
}

// Metrics are the metrics a threshold may name, in the order check prints them.
var Metrics = []MetricSpec{
	{Name: "wait_s", Kind: TrendMetric, Time: true, Doc: "queue wait of each sent attempt: submit → first content byte"},
	{Name: "ttfb_s", Kind: TrendMetric, Time: true, Doc: "submit → response headers, of each sent attempt that has it"},
	{Name: "elapsed_s", Kind: TrendMetric, Time: true, Doc: "submit → last byte, of each sent attempt"},
	{Name: "tokens", Kind: TrendMetric, Doc: "prompt + completion tokens of each sent attempt"},
	{Name: "tpot_s", Kind: TrendMetric, Time: true, Doc: "time per output token of each ok attempt: (elapsed − wait) ÷ (completion tokens − 1) (docs/load.md)"},
	{Name: "itl_s", Kind: TrendMetric, Time: true, Doc: "mean gap between chunks carrying text, of each sent attempt with two or more such chunks (docs/load.md)"},
	{Name: "output_tps", Kind: TrendMetric, Doc: "output tokens per second of each ok attempt: completion tokens ÷ elapsed (docs/load.md)"},
	{Name: "goodput", Kind: ValueMetric, Doc: "jobs per second that succeeded with every per-attempt threshold met by their ok attempt (docs/load.md)"},
	{Name: "attempts_per_success", Kind: ValueMetric, Doc: "sent attempts ÷ jobs that succeeded (+Inf with no success)"},
	{Name: "retry_ratio", Kind: ValueMetric, Doc: "sent attempts ÷ jobs"},
	{Name: "retry_tax", Kind: ValueMetric, Percent: true, Doc: "share of tokens spent in attempts that did not produce the kept result"},
	{Name: "refused_rate", Kind: RateMetric, Percent: true, Doc: "rows the policy refuses before sending (sent=false, or flipped to a refusal on replay; a sent attempt cut live is not one) ÷ rows"},
	{Name: "retry_budget_refusals", Kind: RateMetric, Percent: true, Doc: "rows refused for the retry budget (refuse: retry budget, on replay) ÷ rows"},
	{Name: "unknown_rate", Kind: RateMetric, Percent: true, Doc: "jobs that ended unknown ÷ jobs"},
	{Name: "deadline_miss_rate", Kind: RateMetric, Percent: true, Doc: "jobs whose time (Σ delay + elapsed of sent attempts) exceeds budget.deadline ÷ jobs"},
	{Name: "billable_failure_rate", Kind: RateMetric, Percent: true, Doc: "failed attempts billed (ambiguous counts as billed) ÷ failed attempts"},
	{Name: "cache_write_rate_on_retries", Kind: RateMetric, Percent: true, Doc: "retries (attempt > 1) that wrote their prompt to the cache again (cache_write_tokens > 0) ÷ retries whose provider reports cache writes"},
	{Name: "cached_share", Kind: ValueMetric, Percent: true, Doc: "cached input tokens ÷ prompt tokens, over sent attempts whose provider reports cached_tokens"},
	{Name: "reasoning_share", Kind: ValueMetric, Percent: true, Doc: "reasoning tokens ÷ completion tokens, over sent attempts whose provider reports reasoning_tokens"},
}

// LookupMetric finds a metric by name.
func LookupMetric(name string) (MetricSpec, bool) {
	for _, m := range Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return MetricSpec{}, false
}

// Aggregations.
const (
	AggAvg        = "avg"
	AggMin        = "min"
	AggMax        = "max"
	AggMed        = "med"
	AggPercentile = "p"
	AggRate       = "rate"
	AggCount      = "count"
	AggValue      = "value"
)

// Operators, as k6 writes them.
var operators = []string{"<", "<=", ">", ">=", "==", "!="}

// Threshold is one parsed expression for one metric.
type Threshold struct {
	Metric string
	Source string  // as written, trimmed
	Agg    string  // one of the Agg constants
	P      float64 // the percentile, for AggPercentile
	Op     string  // one of < <= > >= == !=
	Value  float64 // in the metric's base unit: seconds, tokens, a fraction, a count
	Num    float64 // the number as written, before its unit
	Unit   string  // as written: "", "ms", "s", "m", "%"
	// exact is the limit as the exact decimal written, in the base unit
	// (a big.Rat's RatString: "7/10" for 0.7s, 700ms and 0.7 alike);
	// Value is the double nearest it.
	exact string
}

// ParseThreshold parses expr, one threshold for metric.
func ParseThreshold(metric, expr string) (Threshold, error) {
	spec, ok := LookupMetric(metric)
	if !ok {
		return Threshold{}, unknownMetricError(metric)
	}
	t := Threshold{Metric: metric, Source: strings.TrimSpace(expr)}
	src := t.Source
	if src == "" {
		return t, fmt.Errorf("empty threshold (want e.g. %q)", example(spec))
	}
	// Split at the first run of operator characters, as k6's scanner does.
	i := strings.IndexAny(src, "<>=!")
	if i < 0 {
		return t, fmt.Errorf("threshold %q has no operator (want one of < <= > >= == !=)", src)
	}
	j := i
	for j < len(src) && strings.IndexByte("<>=!", src[j]) >= 0 {
		j++
	}
	lhs, op, rhs := strings.TrimSpace(src[:i]), src[i:j], strings.TrimSpace(src[j:])
	if op == "===" {
		op = "==" // k6 accepts JavaScript's strict equality; it means the same here
	}
	if !slices.Contains(operators, op) {
		return t, fmt.Errorf("threshold %q: unknown operator %q (want one of < <= > >= == !=)", src, op)
	}
	t.Op = op
	if err := t.parseAgg(spec, lhs); err != nil {
		return t, fmt.Errorf("threshold %q: %w", src, err)
	}
	if err := t.parseValue(spec, rhs); err != nil {
		return t, fmt.Errorf("threshold %q: %w", src, err)
	}
	// A share outside 0–100% is a limit nothing can reach: "rate < 101%"
	// always passes, "rate > 100%" never can. Either way it judges nothing.
	if (t.Agg == AggRate || (spec.Percent && t.Agg == AggValue)) && (t.Value < 0 || t.Value > 1) {
		return t, fmt.Errorf("threshold %q: %s is a share of 0%%–100%%; %s can never decide anything", src, metric, rhs)
	}
	return t, nil
}

func (t *Threshold) parseAgg(spec MetricSpec, lhs string) error {
	switch {
	case lhs == "":
		if spec.Kind != ValueMetric {
			return fmt.Errorf("missing aggregation before %q (%s takes %s)", t.Op, spec.Name, kinds[spec.Kind].list)
		}
		t.Agg = AggValue
		return nil
	case strings.HasPrefix(lhs, "p(") && strings.HasSuffix(lhs, ")"):
		inner := strings.TrimSpace(lhs[2 : len(lhs)-1])
		p, err := strconv.ParseFloat(inner, 64)
		if err != nil || math.IsNaN(p) || math.IsInf(p, 0) {
			return fmt.Errorf("percentile %q is not a number", lhs)
		}
		if p <= 0 || p > 100 {
			return fmt.Errorf("percentile %q is out of range (want 0 < N <= 100)", lhs)
		}
		t.Agg, t.P = AggPercentile, p
	case lhs == AggAvg || lhs == AggMin || lhs == AggMax || lhs == AggMed || lhs == AggRate || lhs == AggCount || lhs == AggValue:
		t.Agg = lhs
	default:
		if len(lhs) > 1 && lhs[0] == 'p' && strings.Trim(lhs[1:], "0123456789.") == "" {
			return fmt.Errorf("unknown aggregation %q (did you mean p(%s)? want one of avg min max med p(N) rate count value)", lhs, lhs[1:])
		}
		return fmt.Errorf("unknown aggregation %q (want one of avg min max med p(N) rate count value)", lhs)
	}
	if !slices.Contains(kinds[spec.Kind].aggs, t.Agg) {
		return fmt.Errorf("aggregation %q does not apply to %s (%s takes %s)", lhs, spec.Name, kinds[spec.Kind].name, kinds[spec.Kind].list)
	}
	return nil
}

// kinds says, per metric kind, what a threshold on it may aggregate and
// how errors name it.
var kinds = map[MetricKind]struct {
	aggs        []string
	name, list  string
	count, word string // what count counts; what a fraction of it is
}{
	TrendMetric: {[]string{AggAvg, AggMin, AggMax, AggMed, AggPercentile, AggCount}, "a value per attempt", "avg, min, max, med, p(N) or count", "values", "share"},
	RateMetric:  {[]string{AggRate, AggCount}, "a rate", "rate or count", "matches", "rate"},
	ValueMetric: {[]string{AggValue}, "one number over the whole log", "value, or no aggregation (\"< 1.5\")", "values", "share"},
}

func example(spec MetricSpec) string {
	switch {
	case spec.Kind == TrendMetric && spec.Time:
		return "p(95) < 5s"
	case spec.Kind == TrendMetric:
		return "p(99) < 8000"
	case spec.Kind == RateMetric:
		return "rate < 5%"
	case spec.Percent:
		return "< 25%"
	}
	return "< 1.5"
}

func (t *Threshold) parseValue(spec MetricSpec, rhs string) error {
	if rhs == "" {
		return fmt.Errorf("missing value after %q", t.Op)
	}
	// The number is the longest prefix in ParseFloat's decimal syntax;
	// the rest is the unit ("5em": the e is the unit's, not an exponent).
	num := number().FindString(rhs)
	if num == "" {
		return fmt.Errorf("value %q is not a number", rhs)
	}
	v, err := strconv.ParseFloat(num, 64)
	if errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("value %q is out of range", rhs)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("value %q is not a finite number", rhs)
	}
	unit := strings.TrimSpace(rhs[len(num):])
	t.Unit, t.Num = unit, v
	// The limit is the decimal written, scaled exactly: 700ms is 7/10 s,
	// as 0.7s and 0.7 are, and its double is the one nearest that
	// (700 × 0.001 would be 0.7000000000000001).
	exact, ok := new(big.Rat).SetString(num)
	if !ok {
		exact = new(big.Rat).SetFloat64(v)
	}
	counting := t.Agg == AggCount
	switch {
	case unit == "":
	case counting:
		return fmt.Errorf("unit %q does not apply to count (a plain number of %s)", unit, kinds[spec.Kind].count)
	case spec.Time && (unit == "ms" || unit == "s" || unit == "m"):
		exact.Mul(exact, unitScale[unit])
		v, _ = exact.Float64()
	case spec.Percent && unit == "%":
		exact.Mul(exact, unitScale[unit])
		v, _ = exact.Float64()
	case unit == "ms" || unit == "s" || unit == "m" || unit == "%":
		return fmt.Errorf("unit %q does not apply to %s (%s)", unit, spec.Name, unitHint(spec))
	default:
		return fmt.Errorf("unknown unit %q (%s takes %s)", unit, spec.Name, unitHint(spec))
	}
	if v < 0 && !counting {
		return fmt.Errorf("value %q is negative", rhs)
	}
	if counting && (v < 0 || v != math.Trunc(v)) {
		return fmt.Errorf("count %q is not a whole number", rhs)
	}
	// A rate written as 5 where 5% was meant would be a threshold that can
	// never fail: refuse it rather than pass silently.
	if !counting && spec.Percent && unit == "" && v > 1 {
		return fmt.Errorf("value %q is not a fraction (a %s is between 0 and 1; write %s%% for a percentage)", rhs, kinds[spec.Kind].word, num)
	}
	t.Value, t.exact = v, exact.RatString()
	return nil
}

var number = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?`) })

// unitScale is each unit's worth in its metric's base unit, exactly.
var unitScale = map[string]*big.Rat{
	"ms": big.NewRat(1, 1000), "s": big.NewRat(1, 1), "m": big.NewRat(60, 1), "%": big.NewRat(1, 100),
}

func unitHint(spec MetricSpec) string {
	switch {
	case spec.Time:
		return "ms, s or m; a bare number is seconds"
	case spec.Percent:
		return "% or a fraction between 0 and 1"
	}
	return "a plain number, no unit"
}

func unknownMetricError(name string) error {
	names := make([]string, len(Metrics))
	for i, m := range Metrics {
		names[i] = m.Name
	}
	if best, ok := Closest(name, names); ok {
		return fmt.Errorf("unknown metric %q (did you mean %q? metrics: %s)", name, best, strings.Join(names, ", "))
	}
	return fmt.Errorf("unknown metric %q (metrics: %s)", name, strings.Join(names, ", "))
}

// String is the threshold in canonical form; ParseThreshold reads it back
// to the same Threshold (Source aside).
func (t Threshold) String() string {
	var b strings.Builder
	switch t.Agg {
	case AggPercentile:
		b.WriteString("p(" + strconv.FormatFloat(t.P, 'g', -1, 64) + ") ")
	case AggValue:
		// A single-number metric reads best without it: "< 1.5".
	default:
		b.WriteString(t.Agg + " ")
	}
	b.WriteString(t.Op + " ")
	b.WriteString(t.LimitString())
	return b.String()
}

// LimitString is the limit as it is best read: seconds with an "s", a
// percentage for rates written as one, a plain number otherwise.
func (t Threshold) LimitString() string {
	spec, _ := LookupMetric(t.Metric)
	n := strconv.FormatFloat(t.Num, 'g', -1, 64)
	if spec.Time && t.Unit == "" && t.Agg != AggCount {
		return n + "s"
	}
	return n + t.Unit
}

// Observed is what a metric measured over a log, for Eval.
type Observed struct {
	Values Trend   // TrendMetric: every value
	Num    int64   // RateMetric: how many matched
	Den    int64   // RateMetric: out of how many
	Value  float64 // ValueMetric: the number (NaN when undefined)
	// Exact is a ValueMetric's number exactly, when known (Value is then
	// the double nearest it): the comparison with the limit reads it.
	Exact *big.Rat
	// Saturated says a sum the figure rests on reached its limit
	// (admit.MaxTokens): the figure is then unknown, and no threshold on
	// it passes.
	Saturated bool
}

// Trend is a distribution a trend metric aggregates: how many values,
// their mean, and their nearest-rank percentiles (Percentile's rule; 0 is
// the minimum, 100 the maximum).
type Trend interface {
	Len() int64
	Mean() float64
	Percentile(p float64) float64
}

// ExactTrend is a Trend that holds its values exactly (each the decimal
// a log wrote): the comparison with a limit reads its exact mean and
// percentiles where the doubles tie.
type ExactTrend interface {
	Trend
	MeanRat() *big.Rat
	PercentileRat(p float64) *big.Rat
}

// SortedValues is a Trend over values sorted ascending.
type SortedValues []float64

// Len is how many values there are.
func (s SortedValues) Len() int64 { return int64(len(s)) }

// Mean is their average.
func (s SortedValues) Mean() float64 {
	var t float64
	for _, x := range s {
		t += x
	}
	return t / float64(len(s))
}

// Percentile is Percentile(s, p).
func (s SortedValues) Percentile(p float64) float64 { return Percentile(s, p) }

// Label names what Eval computed: "p(95)", "avg", "rate", "value".
func (t Threshold) Label() string {
	if t.Agg == AggPercentile {
		return "p(" + strconv.FormatFloat(t.P, 'g', -1, 64) + ")"
	}
	return t.Agg
}

// Eval computes the aggregation over o and compares it with the limit.
// A trend with no values is NaN and fails: a percentile of nothing proves
// nothing. A rate over an empty population is 0 (nothing happened, so
// nothing bad did). Percentiles are Percentile's nearest rank.
func (t Threshold) Eval(o Observed) (observed float64, pass bool) {
	observed = t.aggregate(o)
	if math.IsNaN(observed) || o.Saturated && t.Agg != AggCount {
		return observed, false
	}
	return observed, holds(t.cmp(observed, o), t.Op)
}

// cmp compares an observed figure with the limit exactly: the observed
// one as computed from the decimals the log wrote (an ExactTrend's mean
// or percentile, a rate's own fraction, a value's Exact), the limit as
// written. Both doubles are the ones nearest their exact values, and
// rounding keeps order, so unequal doubles decide; equal ones are looked
// at exactly (0.15 against a mean of 0.1 and 0.2; a limit of more digits
// than a double holds). A figure known only as a double is its shortest
// decimal.
func (t Threshold) cmp(x float64, o Observed) int {
	switch {
	case x < t.Value:
		return -1
	case x > t.Value:
		return 1
	}
	lim, ok := new(big.Rat).SetString(t.exact)
	if !ok || math.IsInf(x, 0) {
		return 0 // a Threshold not made by ParseThreshold: its double is all it has
	}
	obs := t.exactOf(o)
	if obs == nil {
		if obs, ok = new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64)); !ok {
			return 0
		}
	}
	return obs.Cmp(lim)
}

// exactOf is the aggregation over o exactly, or nil when o holds doubles only.
func (t Threshold) exactOf(o Observed) *big.Rat {
	switch t.Agg {
	case AggValue:
		return o.Exact
	case AggRate:
		if o.Den > 0 {
			return big.NewRat(o.Num, o.Den)
		}
		return new(big.Rat)
	case AggCount:
		return nil // a count is a whole number: its double is exact
	}
	e, ok := o.Values.(ExactTrend)
	if !ok {
		return nil
	}
	switch t.Agg {
	case AggAvg:
		return e.MeanRat()
	case AggMin:
		return e.PercentileRat(0)
	case AggMax:
		return e.PercentileRat(100)
	case AggMed:
		return e.PercentileRat(50)
	case AggPercentile:
		return e.PercentileRat(t.P)
	}
	return nil
}

// holds reads a comparison's result c (<0, 0, >0) under op.
func holds(c int, op string) bool {
	switch op {
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	case "==":
		return c == 0
	case "!=":
		return c != 0
	}
	return false
}

func (t Threshold) aggregate(o Observed) float64 {
	switch t.Agg {
	case AggValue:
		return o.Value
	case AggRate:
		if o.Den == 0 {
			return 0
		}
		return float64(o.Num) / float64(o.Den)
	case AggCount:
		spec, _ := LookupMetric(t.Metric)
		if spec.Kind == RateMetric {
			return float64(o.Num)
		}
		if o.Values == nil {
			return 0
		}
		return float64(o.Values.Len())
	}
	v := o.Values
	if v == nil || v.Len() == 0 {
		return math.NaN()
	}
	switch t.Agg {
	case AggAvg:
		return v.Mean()
	case AggMin:
		return v.Percentile(0)
	case AggMax:
		return v.Percentile(100)
	case AggMed:
		return v.Percentile(50)
	case AggPercentile:
		return v.Percentile(t.P)
	}
	return math.NaN()
}
