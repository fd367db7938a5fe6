package chart

import (
	"fmt"
	"io"
	"strings"
)

// The drawing model: a chart is drawn once, as a Scene of shapes, and a
// backend renders the scene: SVG (WriteSVG) for report --html and --svg,
// PNG (WritePNG) for --png. Neither reads the other's output, so the two
// cannot drift apart, and a new chart needs no backend work.

// Scene is one chart: its size, what it is, and its shapes in drawing order.
type Scene struct {
	W, H        float64
	Title, Desc string
	Shapes      []Shape
}

// Shape is one of Segment, Rect, Path, Circle, Text and Group.
type Shape interface{ shape() }

// Stroke is how a shape's outline is drawn; no Color, no outline.
type Stroke struct {
	Color string  // "#rrggbb"
	Width float64 // 0: 1
	Dash  string  // an SVG dash array ("5 3"); "" solid
}

// Fill is how a shape's inside is painted: a colour, or one of the
// palette's patterns (Pattern, an index into patterns, drawn over its
// colour); no Color and no Pattern, not at all.
type Fill struct {
	Color   string
	Opacity float64 // 0: opaque
	Pattern string  // a pattern's id (patterns, or genPattern)
}

// Tip is a shape's tooltip (an SVG title; PNG has none).
type Tip string

// Segment is a straight line.
type Segment struct {
	X1, Y1, X2, Y2 float64
	Stroke         Stroke
	Class          string
	Tip            Tip
}

// Rect is a rectangle.
type Rect struct {
	X, Y, W, H float64
	Fill       Fill
	Stroke     Stroke
	Class      string
	Tip        Tip
}

// Step is one step of a path: M (move to X, Y), L (line to X, Y), H (line
// to X), V (line to Y), m and l (relative M and L).
type Step struct {
	Op   byte
	X, Y float64
}

// Path is a line through segments.
type Path struct {
	Steps  []Step
	Fill   Fill
	Stroke Stroke
	Class  string
	Data   [][2]string // data-* attributes (SVG only), as key, value
}

// Circle is a circle.
type Circle struct {
	X, Y, R float64
	Fill    Fill
	Stroke  Stroke
	Class   string
	Tip     Tip
}

// Text is a line of text at (X, Y), its baseline; Rotate turns it
// (degrees) around that point.
type Text struct {
	X, Y   float64
	S      string
	Size   float64 // 0: the chart's 11
	Bold   bool
	Anchor string // "", "middle" or "end"
	Color  string
	Rotate float64
	Class  string
}

// Group holds shapes that belong together (a lane, a legend): SVG keeps
// it for styling and tests (Class, Data), PNG draws its shapes.
type Group struct {
	Class  string
	Data   [][2]string
	Shapes []Shape
	Tip    Tip // the whole group's
}

func (Segment) shape() {}
func (Rect) shape()    {}
func (Path) shape()    {}
func (Circle) shape()  {}
func (Text) shape()    {}
func (Group) shape()   {}

// The palette's fill patterns, by id: series i fills with patterns[i%len]
// over its colour ("" id: plain; the marks are white strokes, or a dot).
var patterns = []struct {
	id    string
	steps []Step
	dot   bool
}{
	{id: ""},
	{id: "p-diag", steps: []Step{{'M', 0, 6}, {'L', 6, 0}}},
	{id: "p-dots", dot: true},
	{id: "p-cross", steps: []Step{{'M', 0, 6}, {'L', 6, 0}, {'M', 0, 0}, {'L', 6, 6}}},
	{id: "p-vert", steps: []Step{{'M', 3, 0}, {'L', 3, 6}}},
	{id: "p-horiz", steps: []Step{{'M', 0, 3}, {'L', 6, 3}}},
	{id: "p-rdiag", steps: []Step{{'M', 0, 0}, {'L', 6, 6}}},
	{id: "p-grid", steps: []Step{{'M', 3, 0}, {'L', 3, 6}, {'M', 0, 3}, {'L', 6, 3}}},
}

// genPattern hatches a gen segment in whichever colour its seat has: a
// white wash and a white diagonal over what is under it.
const genPattern = "p-gen"

// WriteSVG renders s as a small self-contained SVG (no scripts, no
// fonts, no network).
func WriteSVG(w io.Writer, s *Scene) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %s %s" width="%s" height="%s" role="img" aria-labelledby="t d" %s>`,
		num(s.W), num(s.H), num(s.W), num(s.H), fontCSS)
	fmt.Fprintf(&b, `<title id="t">%s</title><desc id="d">%s</desc>`, esc(s.Title), esc(s.Desc))
	b.WriteString(`<defs>`)
	for i, p := range patterns {
		switch {
		case p.id == "":
		case p.dot:
			fmt.Fprintf(&b, `<pattern id="%s" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="%s"/><circle cx="3" cy="3" r="1.2" fill="#fff"/></pattern>`, p.id, Color(i))
		default:
			fmt.Fprintf(&b, `<pattern id="%s" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="%s"/><path d="%s" stroke="#fff" stroke-width="1.3"/></pattern>`, p.id, Color(i), stepsAttr(p.steps, ' '))
		}
	}
	fmt.Fprintf(&b, `<pattern id="%s" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#fff" fill-opacity="0.45"/><path d="M0,6 L6,0" stroke="#fff" stroke-width="1.5"/></pattern>`, genPattern)
	b.WriteString(`</defs>`)
	svgShapes(&b, s.Shapes)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func svgShapes(b *strings.Builder, shapes []Shape) {
	for _, sh := range shapes {
		switch x := sh.(type) {
		case Group:
			b.WriteString(`<g`)
			attr(b, "class", x.Class)
			data(b, x.Data)
			b.WriteString(`>`)
			svgShapes(b, x.Shapes)
			if x.Tip != "" {
				fmt.Fprintf(b, `<title>%s</title>`, esc(string(x.Tip)))
			}
			b.WriteString(`</g>`)
		case Segment:
			b.WriteString(`<line`)
			attr(b, "class", x.Class)
			fmt.Fprintf(b, ` x1="%s" x2="%s" y1="%s" y2="%s"`, num(x.X1), num(x.X2), num(x.Y1), num(x.Y2))
			stroke(b, x.Stroke)
			closeTip(b, "line", x.Tip)
		case Rect:
			b.WriteString(`<rect`)
			attr(b, "class", x.Class)
			fmt.Fprintf(b, ` x="%s" y="%s" width="%s" height="%s"`, num(x.X), num(x.Y), num(x.W), num(x.H))
			fill(b, x.Fill)
			stroke(b, x.Stroke)
			closeTip(b, "rect", x.Tip)
		case Circle:
			b.WriteString(`<circle`)
			attr(b, "class", x.Class)
			fmt.Fprintf(b, ` cx="%s" cy="%s" r="%s"`, num(x.X), num(x.Y), num(x.R))
			fill(b, x.Fill)
			stroke(b, x.Stroke)
			closeTip(b, "circle", x.Tip)
		case Path:
			b.WriteString(`<path`)
			attr(b, "class", x.Class)
			data(b, x.Data)
			if x.Fill == (Fill{}) {
				b.WriteString(` fill="none"`)
			} else {
				fill(b, x.Fill)
			}
			stroke(b, x.Stroke)
			fmt.Fprintf(b, ` d="%s"/>`, stepsAttr(x.Steps, ' '))
		case Text:
			b.WriteString(`<text`)
			attr(b, "class", x.Class)
			if x.Rotate != 0 {
				fmt.Fprintf(b, ` transform="translate(%s %s) rotate(%s)"`, num(x.X), num(x.Y), num(x.Rotate))
			} else {
				fmt.Fprintf(b, ` x="%s" y="%s"`, num(x.X), num(x.Y))
			}
			attr(b, "text-anchor", x.Anchor)
			attr(b, "fill", x.Color)
			if x.Size != 0 {
				fmt.Fprintf(b, ` font-size="%s"`, num(x.Size))
			}
			if x.Bold {
				b.WriteString(` font-weight="bold"`)
			}
			fmt.Fprintf(b, `>%s</text>`, esc(x.S))
		}
	}
}

func attr(b *strings.Builder, k, v string) {
	if v != "" {
		fmt.Fprintf(b, ` %s="%s"`, k, esc(v))
	}
}

func data(b *strings.Builder, kv [][2]string) {
	for _, p := range kv {
		attr(b, "data-"+p[0], p[1])
	}
}

func fill(b *strings.Builder, f Fill) {
	switch {
	case f.Pattern != "":
		attr(b, "fill", "url(#"+f.Pattern+")")
	case f.Color != "":
		attr(b, "fill", f.Color)
	}
	if f.Opacity != 0 {
		fmt.Fprintf(b, ` fill-opacity="%s"`, num2(f.Opacity))
	}
}

func stroke(b *strings.Builder, s Stroke) {
	if s.Color == "" {
		return
	}
	attr(b, "stroke", s.Color)
	if s.Width != 0 {
		fmt.Fprintf(b, ` stroke-width="%s"`, num2(s.Width))
	}
	attr(b, "stroke-dasharray", s.Dash)
}

func closeTip(b *strings.Builder, name string, tip Tip) {
	if tip == "" {
		b.WriteString(`/>`)
		return
	}
	fmt.Fprintf(b, `><title>%s</title></%s>`, esc(string(tip)), name)
}

// stepsAttr writes a path's segments as an SVG d attribute, each letter
// glued to its first number, steps split by sep.
func stepsAttr(steps []Step, sep byte) string {
	var b strings.Builder
	for i, s := range steps {
		if i > 0 {
			b.WriteByte(sep)
		}
		b.WriteByte(s.Op)
		switch s.Op {
		case 'H':
			b.WriteString(num(s.X))
		case 'V':
			b.WriteString(num(s.Y))
		default:
			b.WriteString(num(s.X) + "," + num(s.Y))
		}
	}
	return b.String()
}
