package cmd

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// histCapKey is each --hist metric's cap: the budget key it is read from.
var histCapKey = map[string]string{"wait": "budget.max_wait", "cdf": "budget.max_wait", "elapsed": "budget.deadline", "tokens": "budget.token_ceiling"}

// drawHist draws a small histogram of one metric over every sent attempt,
// with the cap that governs it marked: bins at or under the cap in █,
// bins past it in ░, and a rule where the cap falls.
func drawHist(w io.Writer, metric string, g *summary.Group, cap float64, capLabel string, width int) error {
	var d summary.Dist
	name, unit := metric, "s"
	switch metric {
	case "wait":
		d, name = g.Wait, "wait_s"
	case "elapsed":
		d, name = g.Elapsed, "elapsed_s"
	default:
		d, name, unit = g.Tokens, "tokens", ""
	}
	capName := strings.TrimPrefix(histCapKey[metric], "budget.")
	fmtV := func(v float64) string {
		if unit == "" {
			return strconv.FormatFloat(v, 'f', 0, 64)
		}
		return strconv.FormatFloat(v, 'f', 3, 64) + unit
	}
	fmt.Fprintf(w, "%s of %d sent attempts; %s = %s from %s\n", name, d.N, capName, fmtV(cap), capLabel)
	if d.N == 0 {
		fmt.Fprintln(w, "no values to draw")
		return nil
	}
	bins, step := histBins(d.Values.Max(), cap, unit == "")
	counts := make([]int64, bins)
	var over int64
	d.Values.Each(func(v float64, n int64) {
		// Bins are (lo, hi], the first [0, hi]: a value equal to the cap
		// is admitted by the gate, so it sits under the rule.
		b := int(math.Ceil(v/step-1e-9)) - 1
		b = max(0, min(b, bins-1))
		counts[b] += n
		if v > cap {
			over += n
		}
	})
	var most int64
	for _, c := range counts {
		most = max(most, c)
	}
	barMax := 40
	if width > 0 {
		barMax = max(10, min(60, width-40))
	}
	labelW := len(fmtV(float64(bins)*step))*2 + 3
	ruled := false
	for b, c := range counts {
		lo, hi := float64(b)*step, float64(b+1)*step
		if !ruled && lo >= cap-1e-9 {
			fmt.Fprintf(w, "%s %s %s\n", strings.Repeat("─", labelW), capName, fmtV(cap))
			ruled = true
		}
		n := 0
		if c > 0 {
			n = max(1, int(c*int64(barMax)/most))
		}
		ch := "█"
		if lo >= cap-1e-9 {
			ch = "░"
		}
		note := ""
		if lo < cap-1e-9 && hi > cap+1e-9 {
			note = fmt.Sprintf("  ← %s %s falls inside this bin", capName, fmtV(cap))
		}
		label := fmt.Sprintf("%s–%s", fmtV(lo), fmtV(hi))
		fmt.Fprintf(w, "%*s │%-*s %d%s\n", labelW, label, barMax, strings.Repeat(ch, n), c, note)
	}
	if !ruled {
		fmt.Fprintf(w, "%s %s %s (every value is under it)\n", strings.Repeat("─", labelW), capName, fmtV(cap))
	}
	fmt.Fprintf(w, "%d of %d (%.1f%%) over %s\n", over, d.N, 100*float64(over)/float64(d.N), capName)
	return nil
}

// histBins picks about a dozen equal bins of a round width (1, 2, 2.5 or
// 5 × 10^k) from 0 past the largest value, preferring a width that puts
// the cap exactly on a bin edge.
func histBins(maxV, cap float64, whole bool) (int, float64) {
	top := math.Max(maxV, cap)
	if top <= 0 {
		return 1, 1
	}
	count := func(step float64) int { return int(math.Ceil(top/step - 1e-9)) }
	best, bestScore := 0.0, math.Inf(1)
	for e := -3; e <= 12; e++ {
		for _, m := range []float64{1, 2, 2.5, 5} {
			step := m * math.Pow(10, float64(e))
			if whole && (step < 1 || step != math.Trunc(step)) {
				continue
			}
			n := count(step)
			if n < 4 || n > 30 {
				continue
			}
			score := math.Abs(float64(n) - 12)
			if q := cap / step; cap > 0 && math.Abs(q-math.Round(q)) > 1e-9 {
				score += 100 // the cap would fall inside a bin
			}
			if score < bestScore {
				best, bestScore = step, score
			}
		}
	}
	if best == 0 {
		best = top / 12
		if whole {
			best = math.Max(1, math.Ceil(best))
		}
	}
	return max(1, count(best)), best
}
