package chart

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// MaxPoints bounds the points a CDF line is drawn with: a distribution
// with more distinct values is drawn through evenly spaced ranks (and its
// largest value). The figures marked on it are the summary's, exact.
const MaxPoints = 400

// Series is one distribution and the percentiles to mark on it.
type Series struct {
	Name   string
	Values summary.Sorted
	Marks  []Mark
}

// Mark is a labelled value on a series (p50, p95, p99).
type Mark struct {
	Label string
	X     float64
}

// Rule is a labelled vertical line across a chart (a cap, a deadline).
type Rule struct {
	Label string
	X     float64
}

// CDF is a chart of cumulative distributions on one axis.
type CDF struct {
	Title, XLabel, Unit string
	Series              []Series
	Rules               []Rule
}

// Sampled reports whether drawing s thins its points (MaxPoints).
func Sampled(s summary.Sorted) bool {
	n := 0
	s.Each(func(float64, int64) { n++ })
	return n > MaxPoints
}

// Write draws the chart as SVG.
func (ch CDF) Write(w io.Writer) error { return WriteSVG(w, ch.Scene()) }

// Scene draws the chart.
func (ch CDF) Scene() *Scene {
	sampled := false
	hi := xRange(ch.Series, ch.Rules)
	c := newCanvas(640, 300, ch.Title, "cumulative share of values at or under each "+ch.XLabel)
	xt, a, b := niceTicks(0, hi, 8)
	c.x0, c.x1, c.y0, c.y1 = a, b, 0, 1
	c.axes(ch.XLabel, "share of values at or under (%)", xt, []float64{0, .25, .5, .75, .95, 1},
		func(v float64) string { return Fmt(v, ch.Unit) }, func(v float64) string { return Fmt(v, "%") })
	names := []string{}
	for i, s := range ch.Series {
		names = append(names, s.Name)
		n := s.Values.Len()
		if n == 0 {
			continue
		}
		step := int64(1)
		if Sampled(s.Values) {
			sampled = true
			step = max(1, n/MaxPoints)
		}
		segs := []Step{{Op: 'M', X: c.X(s.Values.Min()), Y: c.Y(0)}}
		var seen, next int64
		s.Values.Each(func(v float64, k int64) {
			seen += k
			if seen >= next || seen == n {
				segs = append(segs, Step{Op: 'H', X: c.X(v)}, Step{Op: 'V', Y: c.Y(float64(seen) / float64(n))})
				next = seen + step
			}
		})
		c.add(Path{Class: "cdf-line", Data: [][2]string{{"series", s.Name}}, Stroke: Stroke{Color: Color(i), Width: 2, Dash: dash(i)}, Steps: segs})
		// Each mark is a circle on the line; the figures are written out
		// in the lower right, one row per series, where a CDF leaves room.
		var text []string
		for _, m := range s.Marks {
			if math.IsNaN(m.X) {
				continue
			}
			q := share(s.Values, m.X)
			c.add(Circle{Class: "mark", X: c.X(m.X), Y: c.Y(q), R: 3.5, Fill: Fill{Color: "#fff"}, Stroke: Stroke{Color: Color(i), Width: 2},
				Tip: Tip(s.Name + " " + m.Label + " " + Fmt(m.X, ch.Unit))})
			text = append(text, m.Label+" "+Fmt(m.X, ch.Unit))
		}
		if len(text) > 0 {
			y := c.top + c.ph - 8 - 14*float64(len(ch.Series)-1-i)
			c.group("figures")
			c.add(Segment{X1: c.left + c.pw - 18, X2: c.left + c.pw - 4, Y1: y - 3, Y2: y - 3, Stroke: Stroke{Color: Color(i), Width: 2, Dash: dash(i)}},
				Text{X: c.left + c.pw - 22, Y: y, Anchor: "end", Color: ink, Size: 10, S: s.Name + ": " + strings.Join(text, " · ")})
			c.end()
		}
	}
	for _, r := range ch.Rules {
		c.rule(r.X, r.Label)
	}
	c.legend(names, true)
	if sampled {
		c.note("lines drawn through at most 400 points; marked figures are exact")
	}
	return c.finish()
}

// share is the fraction of values at or under x.
func share(s summary.Sorted, x float64) float64 {
	var at int64
	s.Each(func(v float64, k int64) {
		if v <= x {
			at += k
		}
	})
	return float64(at) / float64(s.Len())
}

// Hist is a histogram of one or more series stacked, with rules: a CDF's
// figures drawn as bins.
type Hist CDF

// Write draws the histogram as SVG.
func (ch Hist) Write(w io.Writer) error { return WriteSVG(w, ch.Scene()) }

// Scene draws the histogram: about 20 bins of a round width from 0.
func (ch Hist) Scene() *Scene {
	hi := xRange(ch.Series, ch.Rules)
	step := niceStep(math.Max(hi, 1e-9) / 20)
	bins := max(1, int(math.Ceil(hi/step-1e-9))+1)
	counts := make([][]int64, len(ch.Series))
	tot := make([]int64, bins)
	for i, s := range ch.Series {
		counts[i] = make([]int64, bins)
		s.Values.Each(func(v float64, k int64) {
			b := int(math.Floor(v/step + 1e-9))
			b = max(0, min(b, bins-1))
			counts[i][b] += k
			tot[b] += k
		})
	}
	var most int64
	for _, t := range tot {
		most = max(most, t)
	}
	c := newCanvas(640, 260, ch.Title, "how many values fall in each bin of "+ch.XLabel)
	xt, a, b := niceTicks(0, float64(bins)*step, 8)
	yt, ya, yb := niceTicks(0, float64(max(most, 1)), 5)
	c.x0, c.x1, c.y0, c.y1 = a, b, ya, yb
	c.axes(ch.XLabel+" (bins of "+Fmt(step, ch.Unit)+")", "values (count)", xt, yt,
		func(v float64) string { return Fmt(v, ch.Unit) }, func(v float64) string { return Fmt(v, "") })
	names := []string{}
	for _, s := range ch.Series {
		names = append(names, s.Name)
	}
	for b := range bins {
		base := 0.0
		for i := range ch.Series {
			k := counts[i][b]
			if k == 0 {
				continue
			}
			x0, x1 := c.X(float64(b)*step), c.X(float64(b+1)*step)
			y0, y1 := c.Y(base), c.Y(base+float64(k))
			c.add(Rect{Class: "bar", X: x0, Y: y1, W: math.Max(x1-x0-1, 0.5), H: y0 - y1, Fill: areaFill(i), Stroke: Stroke{Color: Color(i), Width: 0.5},
				Tip: Tip(fmt.Sprintf("%s %s–%s: %d", ch.Series[i].Name, Fmt(float64(b)*step, ch.Unit), Fmt(float64(b+1)*step, ch.Unit), k))})
			base += float64(k)
		}
	}
	for _, r := range ch.Rules {
		c.rule(r.X, r.Label)
	}
	c.legend(names, false)
	return c.finish()
}

// Stack is one bar of a stacked bar chart: a label and a value per part.
type Stack struct {
	Label  string
	Values []float64
}

// Bars is a stacked bar chart over categories (groups, time buckets).
type Bars struct {
	Title, XLabel, YLabel, Unit string
	Parts                       []string // what each value of a Stack is
	Stacks                      []Stack
	// Spans shade runs of bars (a breaker open), by index, each labelled.
	Spans []Span
	// Lines are drawn over the bars on the same axis, one point per bar.
	Lines     []Line
	LabelEach int // label every n-th bar (0: each)
}

// Span is a run of bars, From to To inclusive, shaded and labelled.
type Span struct {
	From, To int
	Label    string
}

// Line is a series of values over a bar chart's categories.
type Line struct {
	Name   string
	Values []float64
}

// Write draws the bars as SVG.
func (ch Bars) Write(w io.Writer) error { return WriteSVG(w, ch.Scene()) }

// Scene draws the bars.
func (ch Bars) Scene() *Scene {
	most := 0.0
	for _, s := range ch.Stacks {
		t := 0.0
		for _, v := range s.Values {
			t += v
		}
		most = math.Max(most, t)
	}
	for _, l := range ch.Lines {
		for _, v := range l.Values {
			most = math.Max(most, v)
		}
	}
	c := newCanvas(640, 280, ch.Title, ch.YLabel+" per "+ch.XLabel)
	n := max(len(ch.Stacks), 1)
	yt, ya, yb := niceTicks(0, math.Max(most, 1e-9), 5)
	c.x0, c.x1, c.y0, c.y1 = 0, float64(n), ya, yb
	c.axes(ch.XLabel, ch.YLabel, nil, yt, nil, func(v float64) string { return Fmt(v, ch.Unit) })
	for i, sp := range ch.Spans {
		x0, x1 := c.X(float64(sp.From)), c.X(float64(sp.To+1))
		c.group("span")
		c.add(Rect{X: x0, Y: c.top, W: x1 - x0, H: c.ph, Fill: Fill{Color: "#000", Opacity: 0.08}, Stroke: Stroke{Color: "#000", Dash: "2 2"}, Tip: Tip(sp.Label)},
			Text{X: x0 + 2, Y: c.top + 12 + 12*float64(i%3), Size: 10, Color: ink, S: sp.Label})
		c.end()
	}
	bw := c.pw / float64(n)
	every := max(ch.LabelEach, 1)
	for j, s := range ch.Stacks {
		base := 0.0
		for i, v := range s.Values {
			if v <= 0 {
				continue
			}
			y0, y1 := c.Y(base), c.Y(base+v)
			c.add(Rect{Class: "bar", X: c.X(float64(j)) + bw*0.1, Y: y1, W: math.Max(bw*0.8, 0.5), H: y0 - y1, Fill: areaFill(i),
				Stroke: Stroke{Color: Color(i), Width: 0.5}, Tip: Tip(s.Label + ", " + ch.Parts[i] + ": " + Fmt(v, ch.Unit))})
			base += v
		}
		if j%every == 0 {
			c.add(Text{X: c.X(float64(j)) + bw/2, Y: c.top + c.ph + 15, Anchor: "middle", Color: ink, Size: 10, S: s.Label})
		}
	}
	for li, l := range ch.Lines {
		i := len(ch.Parts) + li
		var segs []Step
		for j, v := range l.Values {
			op := byte('L')
			if j == 0 {
				op = 'M'
			}
			segs = append(segs, Step{Op: op, X: c.X(float64(j)) + bw/2, Y: c.Y(v)})
		}
		c.add(Path{Class: "rate-line", Stroke: Stroke{Color: Color(i), Width: 2, Dash: dash(i)}, Steps: segs})
	}
	names := append([]string{}, ch.Parts...)
	for _, l := range ch.Lines {
		names = append(names, l.Name)
	}
	c.legend(names, false)
	return c.finish()
}
