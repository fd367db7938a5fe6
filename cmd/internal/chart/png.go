package chart

import (
	"encoding/xml"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/fogleman/gg"
	"github.com/golang/freetype/truetype"
	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
)

// PNG paints a chart this package drew as SVG into a PNG, at scale times
// its size, so --png gives the same charts as --svg. It reads only the
// elements and attributes this package writes (line, rect, path, circle,
// text and its fill patterns), not SVG at large.
func PNG(svg io.Reader, w io.Writer, scale float64) error {
	var root node
	if err := xml.NewDecoder(svg).Decode(&root); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if root.XMLName.Local != "svg" {
		return errors.New("chart: no svg element")
	}
	p := &painter{patterns: map[string][]node{}, faces: map[faceKey]font.Face{}, scale: scale}
	if err := p.start(root.attrs()); err != nil {
		return err
	}
	p.paint(root.Kids)
	return p.dc.EncodePNG(w)
}

// node is one element of a chart's SVG.
type node struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Text    string     `xml:",chardata"`
	Kids    []node     `xml:",any"`
}

func (n *node) attrs() map[string]string {
	m := make(map[string]string, len(n.Attrs))
	for _, a := range n.Attrs {
		m[a.Name.Local] = a.Value
	}
	return m
}

type painter struct {
	dc       *gg.Context
	scale    float64
	patterns map[string][]node // a fill pattern's marks, by id
	faces    map[faceKey]font.Face
}

// paint draws elements in document order: a title or desc is not drawn,
// a pattern is kept to fill with, a group's elements are drawn.
func (p *painter) paint(nodes []node) {
	for _, n := range nodes {
		a := n.attrs()
		switch n.XMLName.Local {
		case "title", "desc":
		case "pattern":
			p.patterns[a["id"]] = n.Kids
		case "defs", "g":
			p.paint(n.Kids)
		case "text":
			p.text(a, n.Text)
		default:
			p.shape(n.XMLName.Local, a)
		}
	}
}

func f(a map[string]string, k string) float64 {
	v, _ := strconv.ParseFloat(a[k], 64)
	return v
}

func (p *painter) start(a map[string]string) error {
	w, h := f(a, "width"), f(a, "height")
	if w <= 0 || h <= 0 || w > 10000 || h > 10000 {
		return fmt.Errorf("chart: svg size %gx%g", w, h)
	}
	p.dc = gg.NewContext(int(math.Ceil(w*p.scale)), int(math.Ceil(h*p.scale)))
	p.dc.Scale(p.scale, p.scale)
	p.dc.SetColor(color.White)
	p.dc.Clear()
	return nil
}

// paint parses "#RRGGBB" (and "none", "#fff").
func paint(s string, opacity string) (color.Color, bool) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" || !strings.HasPrefix(s, "#") {
		return nil, false
	}
	h := s[1:]
	if len(h) == 3 {
		h = string([]byte{h[0], h[0], h[1], h[1], h[2], h[2]})
	}
	v, err := strconv.ParseUint(h, 16, 32)
	if err != nil || len(h) != 6 {
		return nil, false
	}
	al := 1.0
	if opacity != "" {
		al, _ = strconv.ParseFloat(opacity, 64)
	}
	c := color.NRGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), uint8(math.Round(al * 255))}
	return c, true
}

func (p *painter) stroke(a map[string]string) {
	c, ok := paint(a["stroke"], "")
	if !ok {
		p.dc.ClearPath()
		return
	}
	p.dc.SetColor(c)
	wd := f(a, "stroke-width")
	if wd == 0 {
		wd = 1
	}
	p.dc.SetLineWidth(wd)
	var dash []float64
	for _, d := range strings.Fields(a["stroke-dasharray"]) {
		v, _ := strconv.ParseFloat(d, 64)
		dash = append(dash, v)
	}
	p.dc.SetDash(dash...)
	p.dc.Stroke()
	p.dc.SetDash()
}

// fill fills the current path, keeping it, with a colour or one of the
// chart's patterns (its base colour, then its marks tiled over it,
// clipped), within the box x, y, w, h.
func (p *painter) fill(a map[string]string, x, y, w, h float64) {
	fl := a["fill"]
	if strings.HasPrefix(fl, "url(#") {
		pat, ok := p.patterns[strings.TrimSuffix(strings.TrimPrefix(fl, "url(#"), ")")]
		if !ok {
			return
		}
		p.dc.Push()
		p.dc.Clip()
		for tx := math.Floor(x/6) * 6; tx < x+w; tx += 6 {
			for ty := math.Floor(y/6) * 6; ty < y+h; ty += 6 {
				p.dc.Push()
				p.dc.Translate(tx, ty)
				for _, s := range pat {
					p.shape(s.XMLName.Local, s.attrs())
				}
				p.dc.Pop()
			}
		}
		p.dc.ResetClip()
		p.dc.Pop()
		return
	}
	if c, ok := paint(fl, a["fill-opacity"]); ok {
		p.dc.SetColor(c)
		p.dc.FillPreserve()
	}
}

func (p *painter) shape(name string, a map[string]string) {
	dc := p.dc
	switch name {
	case "line":
		dc.DrawLine(f(a, "x1"), f(a, "y1"), f(a, "x2"), f(a, "y2"))
		p.stroke(a)
	case "rect":
		x, y, w, h := f(a, "x"), f(a, "y"), f(a, "width"), f(a, "height")
		dc.DrawRectangle(x, y, w, h)
		p.fill(a, x, y, w, h)
		dc.DrawRectangle(x, y, w, h)
		p.stroke(a)
	case "circle":
		cx, cy, r := f(a, "cx"), f(a, "cy"), f(a, "r")
		dc.DrawCircle(cx, cy, r)
		p.fill(a, cx-r, cy-r, 2*r, 2*r)
		dc.DrawCircle(cx, cy, r)
		p.stroke(a)
	case "path":
		p.path(a["d"])
		p.fill(a, 0, 0, 0, 0) // paths are lines, or filled with a colour
		p.stroke(a)
	}
}

// path traces the commands this package writes: M L H V m l, each
// letter glued to its first number, numbers split by spaces or commas.
func (p *painter) path(d string) {
	var x, y float64
	var cmd byte
	var args []float64
	for _, tok := range strings.FieldsFunc(d, func(r rune) bool { return r == ' ' || r == ',' }) {
		if c := tok[0]; (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') {
			cmd, args, tok = c, args[:0], tok[1:]
			if tok == "" {
				continue
			}
		}
		v, err := strconv.ParseFloat(tok, 64)
		if err != nil {
			return
		}
		args = append(args, v)
		switch {
		case cmd == 'H':
			x = v
		case cmd == 'V':
			y = v
		case len(args) < 2:
			continue
		case cmd == 'M' || cmd == 'L':
			x, y = args[0], args[1]
		case cmd == 'm' || cmd == 'l':
			x, y = x+args[0], y+args[1]
		default:
			return
		}
		args = args[:0]
		if cmd == 'M' || cmd == 'm' {
			p.dc.MoveTo(x, y)
		} else {
			p.dc.LineTo(x, y)
		}
	}
}

// fonts are Go's regular (false) and bold (true), parsed once. A face
// keeps glyph caches and is not safe to share: each painter makes its own.
var fonts = sync.OnceValue(func() map[bool]*truetype.Font {
	regular, _ := truetype.Parse(goregular.TTF)
	bold, _ := truetype.Parse(gobold.TTF)
	return map[bool]*truetype.Font{false: regular, true: bold}
})

type faceKey struct {
	size float64
	bold bool
}

func (p *painter) face(size float64, bold bool) font.Face {
	k := faceKey{size, bold}
	if p.faces[k] == nil {
		p.faces[k] = truetype.NewFace(fonts()[bold], &truetype.Options{Size: size, DPI: 72, Hinting: font.HintingNone})
	}
	return p.faces[k]
}

func (p *painter) text(a map[string]string, s string) {
	if strings.TrimSpace(s) == "" {
		return
	}
	size := f(a, "font-size")
	if size == 0 {
		size = 11
	}
	// Faces are drawn at the pixel size, so text stays sharp when scaled.
	dc := p.dc
	dc.Push()
	defer dc.Pop()
	x, y := f(a, "x"), f(a, "y")
	if tr := a["transform"]; strings.HasPrefix(tr, "translate(") {
		var tx, ty, rot float64
		fmt.Sscanf(tr, "translate(%g %g) rotate(%g)", &tx, &ty, &rot)
		dc.Translate(tx, ty)
		dc.Rotate(gg.Radians(rot))
	}
	dc.Scale(1/p.scale, 1/p.scale)
	dc.SetFontFace(p.face(size*p.scale, a["font-weight"] == "bold"))
	c, ok := paint(a["fill"], "")
	if !ok {
		c = color.Black
	}
	dc.SetColor(c)
	ax := map[string]float64{"middle": 0.5, "end": 1}[a["text-anchor"]]
	dc.DrawStringAnchored(s, x*p.scale, y*p.scale, ax, 0)
}
