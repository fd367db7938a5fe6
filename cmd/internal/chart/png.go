package chart

import (
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

// WritePNG renders s as a PNG at scale times its size: the same scene
// WriteSVG writes, painted with gg, so --png gives the charts --svg does.
func WritePNG(w io.Writer, s *Scene, scale float64) error {
	if s.W <= 0 || s.H <= 0 || s.W > 10000 || s.H > 10000 || !(scale > 0 && scale <= 8) {
		return fmt.Errorf("chart: size %gx%g at scale %g", s.W, s.H, scale)
	}
	p := &painter{dc: gg.NewContext(int(math.Ceil(s.W*scale)), int(math.Ceil(s.H*scale))), scale: scale, faces: map[faceKey]font.Face{}}
	p.dc.Scale(scale, scale)
	p.dc.SetColor(color.White)
	p.dc.Clear()
	p.paint(s.Shapes)
	return p.dc.EncodePNG(w)
}

type painter struct {
	dc    *gg.Context
	scale float64
	faces map[faceKey]font.Face
}

func (p *painter) paint(shapes []Shape) {
	dc := p.dc
	for _, sh := range shapes {
		switch x := sh.(type) {
		case Group:
			p.paint(x.Shapes)
		case Segment:
			dc.DrawLine(x.X1, x.Y1, x.X2, x.Y2)
			p.stroke(x.Stroke)
		case Rect:
			dc.DrawRectangle(x.X, x.Y, x.W, x.H)
			p.fill(x.Fill, x.X, x.Y, x.W, x.H)
			dc.DrawRectangle(x.X, x.Y, x.W, x.H)
			p.stroke(x.Stroke)
		case Circle:
			dc.DrawCircle(x.X, x.Y, x.R)
			p.fill(x.Fill, x.X-x.R, x.Y-x.R, 2*x.R, 2*x.R)
			dc.DrawCircle(x.X, x.Y, x.R)
			p.stroke(x.Stroke)
		case Path:
			p.trace(x.Steps)
			p.fill(x.Fill, 0, 0, 0, 0) // paths are lines, or filled with a colour
			p.trace(x.Steps)
			p.stroke(x.Stroke)
		case Text:
			p.text(x)
		}
	}
}

// rgba parses "#RRGGBB" or "#RGB" at opacity (0: opaque).
func rgba(s string, opacity float64) (color.Color, bool) {
	if !strings.HasPrefix(s, "#") {
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
	if opacity == 0 {
		opacity = 1
	}
	return color.NRGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), uint8(math.Round(opacity * 255))}, true
}

func (p *painter) stroke(s Stroke) {
	c, ok := rgba(s.Color, 0)
	if !ok {
		p.dc.ClearPath()
		return
	}
	p.dc.SetColor(c)
	p.dc.SetLineWidth(cmpOr(s.Width, 1))
	var dash []float64
	for _, d := range strings.Fields(s.Dash) {
		v, _ := strconv.ParseFloat(d, 64)
		dash = append(dash, v)
	}
	p.dc.SetDash(dash...)
	p.dc.Stroke()
	p.dc.SetDash()
}

func cmpOr(v, or float64) float64 {
	if v == 0 {
		return or
	}
	return v
}

// fill fills the current path with a colour, or a pattern (its base
// colour, then its marks tiled over it, clipped) within the box x, y, w, h.
func (p *painter) fill(f Fill, x, y, w, h float64) {
	dc := p.dc
	if f.Pattern == "" {
		if c, ok := rgba(f.Color, f.Opacity); ok {
			dc.SetColor(c)
			dc.FillPreserve()
		}
		dc.ClearPath()
		return
	}
	base, wash, width := "", 0.0, 1.3
	var steps []Step
	dot := false
	if f.Pattern == genPattern {
		base, wash, width, steps = "#fff", 0.45, 1.5, []Step{{'M', 0, 6}, {'L', 6, 0}}
	}
	for i, pt := range patterns {
		if pt.id != "" && pt.id == f.Pattern {
			base, steps, dot = Color(i), pt.steps, pt.dot
		}
	}
	if base == "" {
		dc.ClearPath()
		return
	}
	dc.Push()
	dc.Clip()
	bc, _ := rgba(base, wash)
	for tx := math.Floor(x/6) * 6; tx < x+w; tx += 6 {
		for ty := math.Floor(y/6) * 6; ty < y+h; ty += 6 {
			dc.DrawRectangle(tx, ty, 6, 6)
			dc.SetColor(bc)
			dc.Fill()
			dc.SetColor(color.White)
			if dot {
				dc.DrawCircle(tx+3, ty+3, 1.2)
				dc.Fill()
				continue
			}
			dc.Push()
			dc.Translate(tx, ty)
			p.trace(steps)
			dc.SetLineWidth(width)
			dc.Stroke()
			dc.Pop()
		}
	}
	dc.ResetClip()
	dc.Pop()
}

// trace lays a path's steps on the context.
func (p *painter) trace(steps []Step) {
	var x, y float64
	for _, s := range steps {
		switch s.Op {
		case 'M', 'L':
			x, y = s.X, s.Y
		case 'm', 'l':
			x, y = x+s.X, y+s.Y
		case 'H':
			x = s.X
		case 'V':
			y = s.Y
		}
		if s.Op == 'M' || s.Op == 'm' {
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

func (p *painter) text(t Text) {
	if strings.TrimSpace(t.S) == "" {
		return
	}
	size := cmpOr(t.Size, 11)
	// Faces are drawn at the pixel size, so text stays sharp when scaled.
	dc := p.dc
	dc.Push()
	defer dc.Pop()
	x, y := t.X, t.Y
	if t.Rotate != 0 {
		dc.Translate(x, y)
		dc.Rotate(gg.Radians(t.Rotate))
		x, y = 0, 0
	}
	dc.Scale(1/p.scale, 1/p.scale)
	dc.SetFontFace(p.face(size*p.scale, t.Bold))
	c, ok := rgba(t.Color, 0)
	if !ok {
		c = color.Black
	}
	dc.SetColor(c)
	ax := map[string]float64{"middle": 0.5, "end": 1}[t.Anchor]
	dc.DrawStringAnchored(t.S, x*p.scale, y*p.scale, ax, 0)
}
