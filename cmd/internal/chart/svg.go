// Package chart draws a summary's distributions, job timelines and counts
// as small self-contained SVG (no scripts, no fonts, no network), for
// report --html and report --svg. It draws; it never computes a figure.
package chart

import (
	"fmt"
	"html"
	"io"
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

// patterns back the palette on areas: series i is filled with pattern
// i%len, its id and the white marks drawn over its colour ("" id: plain;
// p-dots is a dot, the others these strokes).
var patterns = []struct{ id, d string }{{"", ""}, {"p-diag", "M0,6 L6,0"}, {"p-dots", ""}, {"p-cross", "M0,6 L6,0 M0,0 L6,6"},
	{"p-vert", "M3,0 L3,6"}, {"p-horiz", "M0,3 L6,3"}, {"p-rdiag", "M0,0 L6,6"}, {"p-grid", "M3,0 L3,6 M0,3 L6,3"}}

const (
	fontCSS = `font-family="sans-serif" font-size="11"`
	ink     = "#222"
	grid    = "#ddd"
)

// Color is series i's colour.
func Color(i int) string { return Palette[i%len(Palette)] }

// canvas is one SVG document being written.
type canvas struct {
	b      strings.Builder
	w, h   float64
	left   float64 // plot area
	top    float64
	pw, ph float64
	x0, x1 float64 // data range
	y0, y1 float64
	rules  int // rules labelled so far: each label goes one line lower
}

func newCanvas(w, h float64, title, desc string) *canvas {
	c := &canvas{w: w, h: h, left: 64, top: 44}
	c.pw, c.ph = w-c.left-20, h-c.top-48 // title and legend above, axis below
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %s %s" width="%s" height="%s" role="img" aria-labelledby="t d" %s>`,
		num(w), num(h), num(w), num(h), fontCSS)
	fmt.Fprintf(&c.b, `<title id="t">%s</title><desc id="d">%s</desc>`, esc(title), esc(desc))
	c.b.WriteString(`<defs>`)
	for i, p := range patterns {
		switch p.id {
		case "":
		case "p-dots":
			fmt.Fprintf(&c.b, `<pattern id="%s" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="%s"/><circle cx="3" cy="3" r="1.2" fill="#fff"/></pattern>`, p.id, Color(i))
		default:
			fmt.Fprintf(&c.b, `<pattern id="%s" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="%s"/><path d="%s" stroke="#fff" stroke-width="1.3"/></pattern>`, p.id, Color(i), p.d)
		}
	}
	// Gen segments are hatched in whichever colour their seat has.
	c.b.WriteString(`<pattern id="p-gen" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#fff" fill-opacity="0.45"/><path d="M0,6 L6,0" stroke="#fff" stroke-width="1.5"/></pattern>`)
	c.b.WriteString(`</defs>`)
	fmt.Fprintf(&c.b, `<text class="chart-title" x="%s" y="18" font-size="13" font-weight="bold" fill="%s">%s</text>`, num(c.left), ink, esc(title))
	return c
}

// areaFill is the fill of series i's bars: plain colour, or its pattern.
func areaFill(i int) string {
	if p := patterns[i%len(patterns)].id; p != "" {
		return "url(#" + p + ")"
	}
	return Color(i)
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
	c.b.WriteString(`<g class="grid">`)
	for _, v := range yt {
		fmt.Fprintf(&c.b, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"/>`, num(c.left), num(c.left+c.pw), num(c.Y(v)), num(c.Y(v)), grid)
	}
	c.b.WriteString(`</g><g class="axis x-axis">`)
	fmt.Fprintf(&c.b, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"/>`, num(c.left), num(c.left+c.pw), num(c.top+c.ph), num(c.top+c.ph), ink)
	for _, v := range xt {
		x := c.X(v)
		fmt.Fprintf(&c.b, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"/><text x="%s" y="%s" text-anchor="middle" fill="%s">%s</text>`,
			num(x), num(x), num(c.top+c.ph), num(c.top+c.ph+4), ink, num(x), num(c.top+c.ph+16), ink, esc(xfmt(v)))
	}
	fmt.Fprintf(&c.b, `<text class="axis-label" x="%s" y="%s" text-anchor="middle" fill="%s">%s</text>`, num(c.left+c.pw/2), num(c.h-8), ink, esc(xlabel))
	c.b.WriteString(`</g><g class="axis y-axis">`)
	fmt.Fprintf(&c.b, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"/>`, num(c.left), num(c.left), num(c.top), num(c.top+c.ph), ink)
	for _, v := range yt {
		y := c.Y(v)
		fmt.Fprintf(&c.b, `<text x="%s" y="%s" text-anchor="end" fill="%s">%s</text>`, num(c.left-5), num(y+4), ink, esc(yfmt(v)))
	}
	fmt.Fprintf(&c.b, `<text class="axis-label" transform="translate(14 %s) rotate(-90)" text-anchor="middle" fill="%s">%s</text>`, num(c.top+c.ph/2), ink, esc(ylabel))
	c.b.WriteString(`</g>`)
}

// rule draws a labelled vertical line at x (a cap, a deadline).
func (c *canvas) rule(x float64, label string) {
	if math.IsNaN(x) || x < c.x0 {
		return
	}
	if x > c.x1 {
		// Far past the data: said at the right edge rather than drawn,
		// so the data keeps the width.
		c.rules++
		fmt.Fprintf(&c.b, `<g class="rule"><text x="%s" y="%s" text-anchor="end" fill="#A33B00">%s →</text></g>`,
			num(c.left+c.pw), num(c.top+10+12*float64(c.rules-1)), esc(label))
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
	fmt.Fprintf(&c.b, `<g class="rule"><line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="5 3"/><text x="%s" y="%s" text-anchor="%s" fill="#A33B00">%s</text></g>`,
		num(px), num(px), num(c.top), num(c.top+c.ph), num(tx), num(c.top+10+12*float64(c.rules-1)), anchor, esc(label))
}

// legend writes one entry per name at the top right: a swatch drawn the
// way the series is (dash or pattern) and the name.
func (c *canvas) legend(names []string, lines bool) {
	x := c.left + c.pw
	c.b.WriteString(`<g class="legend">`)
	for i := len(names) - 1; i >= 0; i-- {
		w := 7*float64(len([]rune(names[i]))) + 30
		x -= w
		if lines {
			fmt.Fprintf(&c.b, `<line x1="%s" x2="%s" y1="31" y2="31" stroke="%s" stroke-width="2"%s/>`, num(x), num(x+20), Color(i), dashAttr(i))
		} else {
			fmt.Fprintf(&c.b, `<rect x="%s" y="25" width="18" height="11" fill="%s" stroke="%s"/>`, num(x), areaFill(i), Color(i))
		}
		fmt.Fprintf(&c.b, `<text x="%s" y="35" fill="%s">%s</text>`, num(x+23), ink, esc(names[i]))
	}
	c.b.WriteString(`</g>`)
}

func (c *canvas) note(text string) {
	fmt.Fprintf(&c.b, `<text class="note" x="%s" y="16" text-anchor="end" fill="#555" font-size="10">%s</text>`, num(c.w-6), esc(text))
}

func (c *canvas) finish(w io.Writer) error {
	c.b.WriteString("</svg>\n")
	_, err := io.WriteString(w, c.b.String())
	return err
}

// dashAttr is series i's stroke-dasharray attribute ("" for solid).
func dashAttr(i int) string {
	if d := dashes[i%len(dashes)]; d != "" {
		return ` stroke-dasharray="` + d + `"`
	}
	return ""
}

// num writes a coordinate with at most one decimal: enough for a screen,
// and it keeps a page of many charts small.
func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

func esc(s string) string { return html.EscapeString(s) }

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
		return trim(strconv.FormatFloat(v, 'f', 3, 64)) + "s"
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
