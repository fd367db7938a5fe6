package cmd

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/admit"
)

// CostOptions are seed 001's inputs; a nil field was not given, and the
// formulas that need it are left out.
type CostOptions struct {
	IO                 *IOStreams
	FailRate           *float64 // f: an attempt fails before generation
	Retries            *int     // n
	TimeoutRate        *float64 // t: times out on the client, completes (billed) on the server
	Cost               *float64 // C, C1: one attempt on the first seat, USD
	FallbackCost       *float64 // C2: one attempt on the fallback seat, USD
	AttemptsPerSuccess *float64 // seed 004's ratio
	// Parts, from --prices and --usage, is C worked out from a rate card
	// and one attempt's usage by part, in place of --cost.
	Parts  *costParts
	Layers []admit.Layer
	JSON   bool
}

func newCostCmd(f *Factory, runF func(*CostOptions) error) *cobra.Command {
	opts := &CostOptions{IO: f.IO}
	c := &cobra.Command{
		Use:   "cost",
		Short: "What retries, timeouts and failover add to the bill (the failover arithmetic)",
		Long: `Print the retry and failover cost formulas, each beside its number, for
the inputs given. A formula is printed when all of its inputs are.

  expected attempts    (1 − f^(n+1)) / (1 − f)    --fail-rate f --retries n
  its ceiling          1 / (1 − f)                --fail-rate f
  timeout surcharge    C·(1 + t)                  --cost C --timeout-rate t
  failover, pre-gen    C1 + f·C2                  --cost C1 --fallback-cost C2 --fail-rate f
  failover, timeout    C1 + t·(C1 + C2)           --cost C1 --fallback-cost C2 --timeout-rate t
  cost per success     C × attempts per success   --cost C --attempts-per-success a
  layered retries      Π attempts, and expected   --layers sdk=3,app=3,queue=3 [--fail-rate f]
  one attempt's C      its tokens by part × price --prices in=3,out=15,cached_in=0.3,cache_write=3.75
                                                  --usage prompt=4000,completion=400,cached=3979

f is the share of attempts that fail before generation (billed nothing),
t the share that time out on the client but complete, and are billed, on
the server. Rates take a fraction (0.05) or a percentage (5%); costs are
USD per attempt. The last column says what the formula adds over one
attempt on the first seat.

In place of --cost, C can come from a rate card (USD per million tokens,
as a seat's price_in, price_out, price_cached_in, price_cache_write; each
cache price is in's when not given) and one attempt's tokens, where
cached and cache_write are the parts of prompt read from and written to
the prompt cache: C is then priced exactly as rehearsal.log's cost_usd.

For layered retries, list the layers innermost first (the one that calls
the provider first): the worst case is the product of their attempts
(3 × 3 × 3 = 27), the expected number of provider calls needs
--fail-rate, and more than one layer with retries is warned about.` +
			exitStatus("done", "(not used)"),
		Example: `  # 5% pre-generation failures, three retries
  retrygate cost --fail-rate 0.05 --retries 3

  # the failover formula's examples
  retrygate cost --cost 0.004 --fallback-cost 0.011 --fail-rate 0.03 --timeout-rate 0.03

  # $0.02 an attempt at 1.4 attempts per success: the retry tax
  retrygate cost --cost 0.02 --attempts-per-success 1.4

  # the same retry tax for a prompt whose 3979-token prefix is written to the cache
  retrygate cost --prices in=3,out=15,cached_in=0.3,cache_write=3.75 --usage prompt=4000,completion=400,cache_write=3979 --attempts-per-success 1.4`,
		Args: cobra.NoArgs,
		RunE: runE(opts, func(c *cobra.Command, _ []string) error { return opts.fill(c) }, runF, runCost),
	}
	fl := c.Flags()
	fl.String("fail-rate", "", "f: share of attempts that fail before generation (`rate`, 0.05 or 5%)")
	fl.String("retries", "", "n: retries after the first attempt (`count`)")
	fl.String("timeout-rate", "", "t: share of attempts that time out but are billed (`rate`)")
	fl.String("cost", "", "C (C1): cost of one attempt on the first seat (`USD`)")
	fl.String("fallback-cost", "", "C2: cost of one attempt on the fallback seat (`USD`)")
	fl.String("attempts-per-success", "", "attempts per successful task (`ratio`, at least 1)")
	fl.String("prices", "", "C from a rate card, USD per million: in, out[, cached_in, cache_write] as `name=n,...` (with --usage)")
	fl.String("usage", "", "one attempt's tokens: prompt, completion[, cached, cache_write] as `name=n,...` (with --prices)")
	fl.String("layers", "", "retry layers innermost first, `name=attempts,...` (e.g. sdk=3,app=3,queue=3)")
	fl.BoolVar(&opts.JSON, "json", false, "print JSON")
	return c
}

func (o *CostOptions) fill(c *cobra.Command) error {
	var err error
	if o.FailRate, err = flagPtr(c, "fail-rate", parseRate); err != nil {
		return err
	}
	if o.TimeoutRate, err = flagPtr(c, "timeout-rate", parseRate); err != nil {
		return err
	}
	if o.Cost, err = flagPtr(c, "cost", admit.ParseAmount); err != nil {
		return err
	}
	if o.FallbackCost, err = flagPtr(c, "fallback-cost", admit.ParseAmount); err != nil {
		return err
	}
	if o.AttemptsPerSuccess, err = flagPtr(c, "attempts-per-success", admit.ParseAmount); err != nil {
		return err
	}
	prices, usage := c.Flags().Lookup("prices"), c.Flags().Lookup("usage")
	switch {
	case prices.Changed != usage.Changed:
		return badInput("--prices and --usage go together (a rate card and one attempt's tokens make C)")
	case prices.Changed && o.Cost != nil:
		return badInput("--cost: give C or --prices with --usage, not both")
	case prices.Changed:
		var p costParts
		if p.Prices, err = parseCostPrices(prices.Value.String()); err != nil {
			return err
		}
		if p.Usage, err = parseCostTokens(usage.Value.String()); err != nil {
			return err
		}
		o.Parts = &p
		v := admit.Cost(p.Prices, p.Usage)
		o.Cost = &v
	}
	if o.AttemptsPerSuccess != nil && *o.AttemptsPerSuccess < 1 {
		return badInput("--attempts-per-success: must be at least 1 (every success takes an attempt), got %g", *o.AttemptsPerSuccess)
	}
	if n, set, err := flagValue(c, "retries", admit.ParseCount); err != nil {
		return err
	} else if set {
		if n > 1000 {
			return badInput("--retries: %d is past any sane cap (at most 1000)", n)
		}
		o.Retries = ptr(int(n))
	}
	if s := c.Flags().Lookup("layers"); s.Changed {
		if o.Layers, err = parseLayers(s.Value.String()); err != nil {
			return err
		}
	}
	if o.Retries != nil && o.FailRate == nil {
		return badInput("--retries: needs --fail-rate")
	}
	if o.FallbackCost != nil && o.Cost == nil {
		return badInput("--fallback-cost: needs --cost (the first seat's)")
	}
	if len(costResults(o)) == 0 && len(o.Layers) == 0 {
		return withHint(badInput("cost needs the inputs of at least one formula"),
			"e.g. --fail-rate 0.05 --retries 3, or --cost 0.02 --attempts-per-success 1.4; see 'retrygate cost --help'")
	}
	return nil
}

// parseRate reads a probability: admit's rate (a fraction, 0.05, or a
// percentage, 5%), below 1 for the formulas.
func parseRate(s string) (float64, error) {
	v, err := admit.ParseRate(s)
	if err != nil {
		return 0, err
	}
	return v, admit.CheckRate(v)
}

// costResult is one formula, its inputs and its value.
type costResult struct {
	Name     string  `json:"name"`
	Label    string  `json:"-"` // the table's name for it
	Formula  string  `json:"formula"`
	With     string  `json:"with"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`               // "attempts" or "usd"
	Increase float64 `json:"increase"`           // over one attempt on the first seat
	Note     string  `json:"note,omitempty"`     // what the number means
	Baseline float64 `json:"baseline,omitempty"` // the one-attempt figure Increase is against
}

// costResults evaluates every formula whose inputs were given, in seed 001's order.
func costResults(o *CostOptions) []costResult {
	var out []costResult
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	if p := o.Parts; p != nil {
		u, r := p.Usage, p.Prices
		fresh := u.Prompt - u.Cached - u.CacheWrite
		out = append(out, costResult{
			Name: "attempt_cost", Label: "one attempt (C)", Formula: "fresh·in + cached·cached_in + written·cache_write + out·out",
			With: fmt.Sprintf("%d·$%s + %d·$%s + %d·$%s + %d·$%s per 1M", fresh, num(r.In), u.Cached, num(r.CachedIn),
				u.CacheWrite, num(r.CacheWrite), u.Completion, num(r.Out)),
			Value: *o.Cost, Unit: "usd", Baseline: *o.Cost, Note: "C: one attempt, as cost_usd prices it",
		})
	}
	if f := o.FailRate; f != nil {
		if n := o.Retries; n != nil {
			e := admit.ExpectedAttempts(*f, *n)
			out = append(out, costResult{
				Name: "expected_attempts", Label: "expected attempts", Formula: "(1 − f^(n+1)) / (1 − f)",
				With: fmt.Sprintf("f=%s n=%d", num(*f), *n), Value: e, Unit: "attempts", Increase: e - 1, Baseline: 1,
				Note: "attempts per logical request",
			})
		}
		c := admit.AttemptsCeiling(*f)
		out = append(out, costResult{
			Name: "attempts_ceiling", Label: "ceiling (n → ∞)", Formula: "1 / (1 − f)", With: "f=" + num(*f),
			Value: c, Unit: "attempts", Increase: c - 1, Baseline: 1, Note: "however many retries",
		})
	}
	if c, t := o.Cost, o.TimeoutRate; c != nil && t != nil {
		v := admit.TimeoutSurcharge(*c, *t)
		out = append(out, costResult{
			Name: "timeout_surcharge", Label: "timeout surcharge", Formula: "C·(1 + t)", With: fmt.Sprintf("C=$%s t=%s", num(*c), num(*t)),
			Value: v, Unit: "usd", Increase: rel(v, *c), Baseline: *c, Note: "per logical request",
		})
	}
	if c1, c2 := o.Cost, o.FallbackCost; c1 != nil && c2 != nil {
		if f := o.FailRate; f != nil {
			v := admit.FailoverPreGeneration(*c1, *c2, *f)
			out = append(out, costResult{
				Name: "failover_pre_generation", Label: "failover, pre-generation", Formula: "C1 + f·C2",
				With:  fmt.Sprintf("C1=$%s C2=$%s f=%s", num(*c1), num(*c2), num(*f)),
				Value: v, Unit: "usd", Increase: rel(v, *c1), Baseline: *c1, Note: "leg 1 failed before generation",
			})
		}
		if t := o.TimeoutRate; t != nil {
			v := admit.FailoverAfterTimeout(*c1, *c2, *t)
			out = append(out, costResult{
				Name: "failover_after_timeout", Label: "failover, after timeout", Formula: "C1 + t·(C1 + C2)",
				With:  fmt.Sprintf("C1=$%s C2=$%s t=%s", num(*c1), num(*c2), num(*t)),
				Value: v, Unit: "usd", Increase: rel(v, *c1), Baseline: *c1, Note: "leg 1 timed out, billed in full",
			})
		}
	}
	if c, a := o.Cost, o.AttemptsPerSuccess; c != nil && a != nil {
		v := admit.CostPerSuccess(*c, *a)
		out = append(out, costResult{
			Name: "cost_per_success", Label: "cost per success", Formula: "C × attempts per success",
			With:  fmt.Sprintf("C=$%s a=%s", num(*c), num(*a)),
			Value: v, Unit: "usd", Increase: admit.RetryTax(*a), Baseline: *c, Note: "the retry tax",
		})
	}
	return out
}

func rel(v, base float64) float64 {
	if base == 0 {
		return 0
	}
	return v/base - 1
}

// costJSON is the --json shape.
type costJSON struct {
	Results []costResult `json:"results"`
	Layers  *layersJSON  `json:"layers,omitempty"`
}

func runCost(o *CostOptions) error {
	results := costResults(o)
	var lj *layersJSON
	if len(o.Layers) > 0 {
		var rates []layerRate
		if o.FailRate != nil {
			rates = []layerRate{{Label: "--fail-rate", F: *o.FailRate}}
		}
		lj = layersFigures(o.Layers, rates)
		warnLayers(o.IO, o.Layers)
	}
	if o.JSON {
		for i := range results {
			// 0.02 × 1.4 is 0.027999999999999997 in binary; say 0.028.
			results[i].Value, results[i].Increase = roundSig(results[i].Value), roundSig(results[i].Increase)
		}
		return printJSON(o.IO.Out, costJSON{Results: results, Layers: lj})
	}
	if len(results) > 0 {
		rows := make([][]string, 0, len(results))
		for _, r := range results {
			val := fmtAttempts(r.Value)
			if r.Unit == "usd" {
				val = fmtUSDSig(r.Value, 6) // $0.00433, $0.028, $4194.998
			}
			rows = append(rows, []string{r.Label, r.Formula, r.With, val, fmtIncrease(r.Increase), r.Note})
		}
		if err := printTable(o.IO, []string{"quantity", "formula", "with", "value", "vs one attempt", "note"}, rows); err != nil {
			return err
		}
	}
	if lj != nil {
		if len(results) > 0 {
			fmt.Fprintln(o.IO.Out)
		}
		return printLayers(o.IO, lj)
	}
	return nil
}

// roundSig rounds to 12 significant digits: float noise off, every
// digit a person means kept.
func roundSig(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	return r
}

// fmtAttempts writes a count of attempts to 4 decimals, trailing zeros
// dropped: 1.0526, 1.25.
func fmtAttempts(v float64) string {
	s := strconv.FormatFloat(v, 'f', 4, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// fmtUSDSig writes dollars to sig significant digits without an exponent.
func fmtUSDSig(v float64, sig int) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return "$0"
	}
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', sig, 64), 64)
	return sign + "$" + strconv.FormatFloat(r, 'f', -1, 64)
}

// fmtIncrease writes a relative change as a signed percentage: +5.26%.
func fmtIncrease(v float64) string {
	p := v * 100
	if math.Abs(p) < 0.005 {
		return "+0%"
	}
	s := strconv.FormatFloat(p, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if p > 0 {
		s = "+" + s
	}
	return s + "%"
}
