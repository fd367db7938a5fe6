package cmd

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/retrygate/retrygate/cmd/internal/chart"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// drawCDFs draws, for a terminal, the CDF of wait, ttfb and elapsed over
// every sent attempt, with the wait cap marked, each under a sparkline
// row of its percentiles (the summary's figures, as report --json gives).
func drawCDFs(w io.Writer, g *summary.Group, cap float64, capLabel string, width int) error {
	cols := 60
	if width > 0 {
		cols = max(20, min(100, width-16))
	}
	fmt.Fprintf(w, "CDFs of %d sent attempts; max_wait = %s from %s\n", g.Attempts, chart.Fmt(cap, "s"), capLabel)
	for _, m := range []struct {
		name string
		d    summary.Dist
	}{{"wait_s", g.Wait}, {"ttfb_s", g.TTFB}, {"elapsed_s", g.Elapsed}} {
		fmt.Fprintf(w, "\n%s (n=%d)\n", m.name, m.d.N)
		fmt.Fprintln(w, sparkRow(m.d))
		if m.d.N == 0 {
			fmt.Fprintln(w, "no values to draw")
			continue
		}
		terminalCDF(w, m.d.Values, cap, cols)
	}
	return nil
}

// sparkRow is a distribution's percentiles as one line: a bar per
// percentile, scaled to the largest, then the values.
func sparkRow(d summary.Dist) string {
	ps := []struct {
		name string
		v    summary.Figure
	}{{"p50", d.P50}, {"p75", d.P75}, {"p95", d.P95}, {"p99", d.P99}, {"max", d.Max}}
	top := float64(d.Max)
	var bars, vals strings.Builder
	for _, p := range ps {
		bars.WriteString(spark(float64(p.v), top))
		fmt.Fprintf(&vals, " %s %s", p.name, tSec(p.v))
	}
	return bars.String() + " " + strings.TrimSpace(vals.String())
}

var sparkChars = []rune("▁▂▃▄▅▆▇█")

func spark(v, top float64) string {
	if math.IsNaN(v) || math.IsNaN(top) {
		return " "
	}
	if top <= 0 {
		return string(sparkChars[0])
	}
	i := int(math.Round(v / top * float64(len(sparkChars)-1)))
	return string(sparkChars[max(0, min(i, len(sparkChars)-1))])
}

// terminalCDF plots the share of values at or under x, in 8 rows of
// eighth-blocks, x from 0 to the larger of the largest value and the cap;
// the cap's column is marked below the axis.
func terminalCDF(w io.Writer, s summary.Sorted, cap float64, cols int) {
	const rows = 8
	top := math.Max(s.Max(), cap)
	if !(top > 0) {
		top = 1
	}
	share := make([]float64, cols)
	n := float64(s.Len())
	var seen int64
	col := 0
	s.Each(func(v float64, k int64) {
		for col < cols && float64(col+1)*top/float64(cols) < v {
			share[col] = float64(seen) / n
			col++
		}
		seen += k
	})
	for ; col < cols; col++ {
		share[col] = float64(seen) / n
	}
	for r := rows - 1; r >= 0; r-- {
		label := cmp.Or(map[int]string{rows - 1: "100%", rows / 2: " 50%", 0: "  0%"}[r], "    ")
		var line strings.Builder
		for _, q := range share {
			h := q*rows - float64(r)
			switch {
			case h >= 1:
				line.WriteRune('█')
			case h <= 0:
				line.WriteRune(' ')
			default:
				line.WriteRune(sparkChars[max(0, min(int(h*8), 7))])
			}
		}
		fmt.Fprintf(w, "%s │%s\n", label, strings.TrimRight(line.String(), " "))
	}
	axis := []rune(strings.Repeat("─", cols))
	mark := []rune(strings.Repeat(" ", cols))
	if cap > 0 && cap <= top {
		c := min(cols-1, int(cap/top*float64(cols)))
		axis[c] = '┼'
		mark[c] = '^'
	}
	fmt.Fprintf(w, "     └%s\n", string(axis))
	right := chart.Fmt(top, "s")
	fmt.Fprintf(w, "      0s%s%s\n", strings.Repeat(" ", max(1, cols-2-len(right))), right)
	if cap > 0 {
		fmt.Fprintf(w, "      %s max_wait %s\n", strings.TrimRight(string(mark), " "), chart.Fmt(cap, "s"))
	}
}
