// Package chart draws a summary's distributions, job timelines and counts
// for report --html, --svg and --png: each chart is one Scene, rendered
// as SVG or PNG (scene.go). It draws; it never computes a figure.
package chart

import (
	"html"
	"math"
	"strconv"
	"strings"
)

// Palette is Okabe and Ito's colour-blind-safe set, in the order series
// take it. Every series also gets a dash or a fill pattern and a label, so
// no chart rests on colour alone.
var Palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442"}

// dashes back the palette on lines: series i is drawn with dashes[i%len].
var dashes = []string{"", "7 3", "2 2", "9 3 2 3", "4 4", "1 3", "12 4", "5 2 1 2"}

const (
	fontCSS = `font-family="sans-serif" font-size="11"`
	ink     = "#222"
	grid    = "#ddd"
	ruleInk = "#A33B00"
)

// Color is series i's colour.
func Color(i int) string { return Palette[i%len(Palette)] }

// canvas is one chart being drawn: its scene, the plot area and the
// data range, and the groups open.
type canvas struct {
	scene  Scene
	open   []*Group // groups being filled, innermost last
	w, h   float64
	left   float64 // plot area
	top    float64
	pw, ph float64
	x0, x1 float64 // data range
	y0, y1 float64
	rules  int // rules labelled so far: each label goes one line lower
}

func newCanvas(w, h float64, title, desc string) *canvas {
	c := &canvas{w: w, h: h, left: 64, top: 44, scene: Scene{W: w, H: h, Title: title, Desc: desc}}
	c.pw, c.ph = w-c.left-20, h-c.top-48 // title and legend above, axis below
	c.add(Text{Class: "chart-title", X: c.left, Y: 18, Size: 13, Bold: true, Color: ink, S: title})
	return c
}

// add draws a shape, in the innermost open group.
func (c *canvas) add(s ...Shape) {
	if n := len(c.open); n > 0 {
		c.open[n-1].Shapes = append(c.open[n-1].Shapes, s...)
		return
	}
	c.scene.Shapes = append(c.scene.Shapes, s...)
}

// tip sets the tooltip of the innermost open group.
func (c *canvas) tip(t Tip) { c.open[len(c.open)-1].Tip = t }

// group opens a group; end closes it.
func (c *canvas) group(class string, data ...[2]string) {
	c.open = append(c.open, &Group{Class: class, Data: data})
}

func (c *canvas) end() {
	g := c.open[len(c.open)-1]
	c.open = c.open[:len(c.open)-1]
	c.add(*g)
}

// areaFill is the fill of series i's bars: plain colour, or its pattern.
func areaFill(i int) Fill {
	if p := patterns[i%len(patterns)].id; p != "" {
		return Fill{Pattern: p}
	}
	return Fill{Color: Color(i)}
}

func (c *canvas) X(v float64) float64 {
	if c.x1 == c.x0 {
		return c.left
	}
	return c.left + (v-c.x0)/(c.x1-c.x0)*c.pw
}

func (c *canvas) Y(v float64) float64 {
	if c.y1 == c.y0 {
		return c.top + c.ph
	}
	return c.top + c.ph - (v-c.y0)/(c.y1-c.y0)*c.ph
}

// axes draws both axes with ticks, grid lines and their labels; xfmt and
// yfmt format tick values.
func (c *canvas) axes(xlabel, ylabel string, xt, yt []float64, xfmt, yfmt func(float64) string) {
	c.group("grid")
	for _, v := range yt {
		c.add(Segment{X1: c.left, X2: c.left + c.pw, Y1: c.Y(v), Y2: c.Y(v), Stroke: Stroke{Color: grid}})
	}
	c.end()
	c.group("axis x-axis")
	c.add(Segment{X1: c.left, X2: c.left + c.pw, Y1: c.top + c.ph, Y2: c.top + c.ph, Stroke: Stroke{Color: ink}})
	for _, v := range xt {
		x := c.X(v)
		c.add(Segment{X1: x, X2: x, Y1: c.top + c.ph, Y2: c.top + c.ph + 4, Stroke: Stroke{Color: ink}},
			Text{X: x, Y: c.top + c.ph + 16, Anchor: "middle", Color: ink, S: xfmt(v)})
	}
	c.add(Text{Class: "axis-label", X: c.left + c.pw/2, Y: c.h - 8, Anchor: "middle", Color: ink, S: xlabel})
	c.end()
	c.group("axis y-axis")
	c.add(Segment{X1: c.left, X2: c.left, Y1: c.top, Y2: c.top + c.ph, Stroke: Stroke{Color: ink}})
	for _, v := range yt {
		c.add(Text{X: c.left - 5, Y: c.Y(v) + 4, Anchor: "end", Color: ink, S: yfmt(v)})
	}
	c.add(Text{Class: "axis-label", X: 14, Y: c.top + c.ph/2, Rotate: -90, Anchor: "middle", Color: ink, S: ylabel})
	c.end()
}

// rule draws a labelled vertical line at x (a cap, a deadline).
func (c *canvas) rule(x float64, label string) {
	if math.IsNaN(x) || x < c.x0 {
		return
	}
	c.group("rule")
	defer c.end()
	if x > c.x1 {
		// Far past the data: said at the right edge rather than drawn,
		// so the data keeps the width.
		c.rules++
		c.add(Text{X: c.left + c.pw, Y: c.top + 10 + 12*float64(c.rules-1), Anchor: "end", Color: ruleInk, S: label + " →"})
		return
	}
	c.rules++
	px := c.X(x)
	// The label sits left of the line, or right of it when it would
	// run past the axis.
	tx, anchor := px-3, "end"
	if px-c.left < 6.5*float64(len([]rune(label))) {
		tx, anchor = px+3, "start"
	}
	c.add(Segment{X1: px, X2: px, Y1: c.top, Y2: c.top + c.ph, Stroke: Stroke{Color: "#D55E00", Width: 1.5, Dash: "5 3"}},
		Text{X: tx, Y: c.top + 10 + 12*float64(c.rules-1), Anchor: anchor, Color: ruleInk, S: label})
}

// legend writes one entry per name at the top right: a swatch drawn the
// way the series is (dash or pattern) and the name.
func (c *canvas) legend(names []string, lines bool) {
	x := c.left + c.pw
	c.group("legend")
	for i := len(names) - 1; i >= 0; i-- {
		w := 7*float64(len([]rune(names[i]))) + 30
		x -= w
		if lines {
			c.add(Segment{X1: x, X2: x + 20, Y1: 31, Y2: 31, Stroke: Stroke{Color: Color(i), Width: 2, Dash: dash(i)}})
		} else {
			c.add(Rect{X: x, Y: 25, W: 18, H: 11, Fill: areaFill(i), Stroke: Stroke{Color: Color(i)}})
		}
		c.add(Text{X: x + 23, Y: 35, Color: ink, S: names[i]})
	}
	c.end()
}

func (c *canvas) note(text string) {
	c.add(Text{Class: "note", X: c.w - 6, Y: 16, Anchor: "end", Color: "#555", Size: 10, S: text})
}

// finish is the chart's scene, every group closed.
func (c *canvas) finish() *Scene {
	for len(c.open) > 0 {
		c.end()
	}
	return &c.scene
}

// dash is series i's dash array ("" for solid).
func dash(i int) string { return dashes[i%len(dashes)] }

// num writes a coordinate with at most one decimal: enough for a screen,
// and it keeps a page of many charts small.
func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

func esc(s string) string { return html.EscapeString(s) }

// num2 writes a width or an opacity as it is (0.45, 1.3).
func num2(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// niceTicks picks about n round tick values covering [lo, hi] and the
// range they span.
func niceTicks(lo, hi float64, n int) (ticks []float64, a, b float64) {
	if math.IsNaN(lo) || math.IsNaN(hi) || hi <= lo {
		if math.IsNaN(lo) || lo == 0 {
			return []float64{0, 1}, 0, 1
		}
		hi = lo + math.Abs(lo)
		if lo > 0 {
			lo = 0
		}
	}
	step := niceStep((hi - lo) / float64(n))
	a = math.Floor(lo/step) * step
	b = math.Ceil(hi/step-1e-9) * step
	for v := a; v <= b+step/2; v += step {
		ticks = append(ticks, math.Round(v/step)*step)
	}
	return ticks, a, b
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= raw {
			return m * e
		}
	}
	return 10 * e
}

// Fmt formats a tick or a figure in a unit: "s" seconds, "tok" tokens,
// "$" US dollars, "%" a share, "" a plain count.
func Fmt(v float64, unit string) string {
	if math.IsNaN(v) {
		return "-"
	}
	switch unit {
	case "s":
		return trim(strconv.FormatFloat(v, 'f', 6, 64)) + "s" // to the log's microsecond
	case "$":
		return "$" + trim(strconv.FormatFloat(v, 'f', 6, 64))
	case "%":
		return trim(strconv.FormatFloat(v*100, 'f', 1, 64)) + "%"
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return trim(strconv.FormatFloat(v, 'f', 3, 64))
}

func trim(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// xRange is the x axis's top: the series' largest value, and each rule
// within twice that (a rule far past the data is named, not drawn).
func xRange(series []Series, rules []Rule) float64 {
	dataMax := 0.0
	for _, s := range series {
		if s.Values.Len() > 0 {
			dataMax = math.Max(dataMax, s.Values.Max())
		}
	}
	hi := dataMax
	for _, r := range rules {
		if !math.IsNaN(r.X) && (dataMax <= 0 || r.X <= 2*dataMax) {
			hi = math.Max(hi, r.X)
		}
	}
	return hi
}
