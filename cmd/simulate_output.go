package cmd

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse/model"
)

// simJSON is the --json shape.
type simJSON struct {
	Model      string                    `json:"model"`
	Seed       uint64                    `json:"seed"`
	Jobs       int                       `json:"jobs"`
	Rate       float64                   `json:"rate,omitempty"`
	Policies   []policyJSON              `json:"policies"`
	Difference map[string]summary.Figure `json:"difference,omitempty"`
	Layers     *layersJSON               `json:"layers,omitempty"`
}

type policyJSON struct {
	Name string `json:"name"`
	File string `json:"file,omitempty"`
	*model.Summary
}

func anyPriced(sums []*model.Summary) bool {
	for _, s := range sums {
		if s.Priced {
			return true
		}
	}
	return false
}

// simMetric is one row of the table and one key of --json's difference.
type simMetric struct {
	key, name string
	kind      byte // r rate, s seconds, c count per job, u USD, t tokens, n whole number
	priced    bool // only shown when a seat has prices
	get       func(*model.Summary) float64
}

func simMetrics() []simMetric {
	return []simMetric{
		{"success_rate", "success rate", 'r', false, func(s *model.Summary) float64 { return float64(s.SuccessRate) }},
		{"failed_rate", "failed rate", 'r', false, func(s *model.Summary) float64 { return float64(s.FailedRate) }},
		{"unknown_rate", "unknown rate", 'r', false, func(s *model.Summary) float64 { return float64(s.UnknownRate) }},
		{"deadline_miss_rate", "deadline-miss rate", 'r', false, func(s *model.Summary) float64 { return float64(s.DeadlineMissRate) }},
		{"refused_rate", "refused rate (rows)", 'r', false, func(s *model.Summary) float64 { return float64(s.RefusedRate) }},
		{"end_to_end_p50_s", "end to end p50", 's', false, func(s *model.Summary) float64 { return float64(s.E2EP50) }},
		{"end_to_end_p95_s", "end to end p95", 's', false, func(s *model.Summary) float64 { return float64(s.E2EP95) }},
		{"end_to_end_p99_s", "end to end p99", 's', false, func(s *model.Summary) float64 { return float64(s.E2EP99) }},
		{"attempts_per_job", "attempts per job", 'c', false, func(s *model.Summary) float64 { return float64(s.AttemptsPerJob) }},
		{"billed_attempts_per_job", "billed attempts per job", 'c', false, func(s *model.Summary) float64 { return float64(s.BilledPerJob) }},
		{"attempts_per_success", "attempts per success", 'c', false, func(s *model.Summary) float64 { return float64(s.AttemptsPerSuccess) }},
		{"attempt_failure_rate", "attempt failure rate", 'r', false, func(s *model.Summary) float64 { return float64(s.AttemptFailureRate) }},
		{"tokens_per_job", "tokens per job", 't', false, func(s *model.Summary) float64 { return float64(s.TokensPerJob) }},
		{"tokens_per_success", "tokens per success", 't', false, func(s *model.Summary) float64 { return float64(s.TokensPerSuccess) }},
		{"cost_per_job_usd", "cost per job", 'u', true, func(s *model.Summary) float64 { return float64(s.CostPerJob) }},
		{"cost_per_success_usd", "cost per success", 'u', true, func(s *model.Summary) float64 { return float64(s.CostPerSuccess) }},
		{"retry_tax", "retry tax (tokens)", 'r', false, func(s *model.Summary) float64 { return float64(s.RetryTax) }},
		{"retry_tax_usd_share", "retry tax (USD)", 'r', true, func(s *model.Summary) float64 { return float64(s.RetryTaxUSDShare) }},
		{"wasted_calls_per_job", "wasted calls per job", 'c', false, func(s *model.Summary) float64 { return float64(s.WastedPerJob) }},
		{"breaker_open_s", "breaker open", 's', false, func(s *model.Summary) float64 { return float64(s.BreakerOpenS) }},
		{"virtual_duration_s", "virtual time", 's', false, func(s *model.Summary) float64 { return float64(s.DurationS) }},
	}
}

func (m simMetric) format(v float64, diff bool) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 0):
		return "∞"
	}
	s := m.formatRaw(v, diff)
	if strings.Trim(s, "+-0.$%sp ") == "" {
		// Rounded to nothing: no sign, so a change too small to show
		// never reads as a loss.
		return m.formatRaw(0, diff)
	}
	return s
}

func (m simMetric) formatRaw(v float64, diff bool) string {
	sign := ""
	if diff && v >= 0 {
		sign = "+"
	}
	switch m.kind {
	case 'r':
		if diff {
			return sign + strconv.FormatFloat(v*100, 'f', 2, 64) + " pp"
		}
		return strconv.FormatFloat(v*100, 'f', 2, 64) + "%"
	case 's':
		return sign + strconv.FormatFloat(v, 'f', 3, 64) + "s"
	case 'c':
		return sign + strconv.FormatFloat(v, 'f', 4, 64)
	case 'u':
		return sign + fmtUSDSig(v, 4)
	case 't':
		return sign + strconv.FormatFloat(v, 'f', 1, 64)
	}
	return sign + strconv.FormatFloat(v, 'f', -1, 64)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// diff is policy B's figure minus A's: the one difference the table, the
// JSON and the page show. Seconds are milliseconds, as the log writes
// durations (a difference may be negative).
func (m simMetric) diff(a, b *model.Summary) float64 {
	d := m.get(b) - m.get(a)
	if m.kind == 's' && finite(d) {
		d = time.Duration(d * float64(time.Second)).Round(time.Millisecond).Seconds()
	}
	return d
}

// simHeader is the metric table's header (a column per policy, and with
// two the difference) and its metrics: the priced ones only when a seat
// has prices. The table and the page show it alike.
func simHeader(o *SimulateOptions, sums []*model.Summary) (header []string, metrics []simMetric) {
	header = []string{"metric"}
	for i := range sums {
		header = append(header, o.Policies[i].Label)
	}
	if len(sums) == 2 {
		header = append(header, "difference")
	}
	for _, m := range simMetrics() {
		if !m.priced || anyPriced(sums) {
			metrics = append(metrics, m)
		}
	}
	return header, metrics
}

// printSimulateJSON writes --json: every policy's figures, and with two
// the difference of each table metric.
func printSimulateJSON(o *SimulateOptions, sums []*model.Summary, lj *layersJSON, modelName string) error {
	out := simJSON{Model: modelName, Seed: o.Seed, Jobs: o.Jobs, Rate: o.Rate, Layers: lj}
	for i, s := range sums {
		out.Policies = append(out.Policies, policyJSON{Name: o.Policies[i].Label, File: o.Policies[i].File, Summary: s})
	}
	if len(sums) == 2 {
		out.Difference = map[string]summary.Figure{}
		for _, m := range simMetrics() {
			out.Difference[m.key] = summary.Figure(m.diff(sums[0], sums[1]))
		}
	}
	return printJSON(o.IO.Out, out)
}

// printSimulate writes the metric table, policies side by side.
func printSimulate(o *SimulateOptions, sums []*model.Summary, lj *layersJSON, modelName string) error {
	header, metrics := simHeader(o, sums)
	rows := make([][]string, 0, len(metrics))
	for _, m := range metrics {
		row := []string{m.name}
		for _, s := range sums {
			row = append(row, m.format(m.get(s), false))
		}
		if len(sums) == 2 {
			a, b := m.get(sums[0]), m.get(sums[1])
			d := m.format(m.diff(sums[0], sums[1]), true)
			if m.kind != 'r' && a != 0 && b != a && finite(a) && finite(b) {
				d += " (" + fmtIncrease(b/a-1) + ")"
			}
			row = append(row, d)
		}
		rows = append(rows, row)
	}
	rate := "one after another"
	if len(o.Ramp) > 0 {
		rate = "Poisson"
	}
	if o.Rate > 0 {
		rate = strconv.FormatFloat(o.Rate, 'g', -1, 64) + " jobs/s"
	}
	rate += (loadShape{Ramp: o.Ramp, Duration: o.Duration}).human()
	ran := fmt.Sprintf("simulated %d jobs per policy", o.Jobs)
	if o.Jobs == 0 && len(sums) > 0 {
		ran = fmt.Sprintf("simulated %d jobs per policy (bounded by time)", sums[0].Jobs)
	}
	if interrupted(sums) != nil {
		ran = "figures over the jobs that ran before the interruption" // the warning above gives the count
	}
	fmt.Fprintf(o.IO.ErrOut, "%s, %s, seed %d, model %s\n", ran, rate, o.Seed, modelName)
	if !anyPriced(sums) {
		fmt.Fprintln(o.IO.ErrOut, "retrygate: hint: no seat has prices (price_in, price_out): costs are left out")
	}
	if err := printTable(o.IO, header, rows); err != nil {
		return err
	}
	if len(o.Ramp) > 0 {
		fmt.Fprintln(o.IO.Out)
		if err := printSimSteps(o, sums); err != nil {
			return err
		}
	}
	if lj != nil {
		fmt.Fprintln(o.IO.Out)
		if err := printLayers(o.IO, lj); err != nil {
			return err
		}
	}
	return nil
}

// printSimSteps writes --ramp's table: per rate step, each policy's
// share of sent attempts that were retries, its goodput (ok answers per
// second) and its bill. A retry storm is the retry share climbing while
// goodput falls, and staying there after the rate comes back down.
func printSimSteps(o *SimulateOptions, sums []*model.Summary) error {
	header := []string{"from", "jobs/s"}
	for i := range sums {
		l := o.Policies[i].Label
		header = append(header, l+" retries", l+" goodput/s")
		if sums[i].Priced {
			header = append(header, l+" cost")
		}
	}
	var rows [][]string
	for k := range o.Ramp {
		row := []string{(time.Duration(k) * o.Ramp[0].For).String(), strconv.FormatFloat(o.Ramp[k].Rate, 'g', -1, 64)}
		for _, s := range sums {
			var st summary.Step
			if k < len(s.Steps) {
				st = s.Steps[k]
			}
			share := "-"
			if st.Attempts > 0 {
				share = strconv.FormatFloat(float64(st.RetryShare)*100, 'f', 1, 64) + "%"
			}
			row = append(row, share, strconv.FormatFloat(float64(st.Goodput), 'f', 2, 64))
			if s.Priced {
				row = append(row, fmtUSDSig(st.USD, 4))
			}
		}
		rows = append(rows, row)
	}
	return printTable(o.IO, header, rows)
}
