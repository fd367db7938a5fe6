package chart

import (
	"fmt"
	"io"
	"math"

	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// TimelineJob is one job's attempts, in seconds from its first submit,
// as the summary traced it (summary.Drawing.Timeline).
type TimelineJob = summary.Trace

// TimelineAttempt is one row of a job: a sent attempt (wait then gen) or
// a refusal (a mark with its reason).
type TimelineAttempt = summary.TraceAttempt

// Timeline draws jobs one per lane.
type Timeline struct {
	Title string
	Jobs  []TimelineJob
}

// Write draws the lanes as SVG.
func (ch Timeline) Write(w io.Writer) error { return WriteSVG(w, ch.Scene()) }

// Scene draws the lanes: each attempt a bar, its wait solid and its gen
// hatched, backoff sleeps the gaps between them, refusals a cross with
// their reason, and attempts on a fallback seat in vermillion and marked
// "fallback".
func (ch Timeline) Scene() *Scene {
	hi := 0.0
	for _, j := range ch.Jobs {
		for _, a := range j.Attempts {
			hi = math.Max(hi, a.Start+a.Wait+a.Gen)
		}
	}
	lane := 26.0
	h := 44 + 48 + lane*float64(max(len(ch.Jobs), 1))
	c := newCanvas(760, h, ch.Title, "each job's attempts over time: wait solid, gen hatched, gaps are backoff sleeps, crosses are refusals")
	c.left = 150
	c.pw = c.w - c.left - 20
	xt, a, b := niceTicks(0, math.Max(hi, 1e-9), 8)
	c.x0, c.x1 = a, b
	c.y0, c.y1 = 0, float64(max(len(ch.Jobs), 1))
	c.axes("seconds since the job's first submit (s)", "job", xt, nil,
		func(v float64) string { return Fmt(v, "s") }, nil)
	for i, j := range ch.Jobs {
		y := c.top + float64(i)*lane + 4
		end := j.End
		if end == "" {
			end = "open"
		}
		c.group("lane", [2]string{"job", j.ID})
		c.add(Text{X: c.left - 6, Y: y + 13, Anchor: "end", Color: ink, S: clip(j.ID, 14) + " · " + end})
		prevEnd := math.NaN()
		for _, at := range j.Attempts {
			x := c.X(at.Start)
			if !math.IsNaN(prevEnd) && at.Start > prevEnd {
				c.add(Segment{Class: "backoff", X1: c.X(prevEnd), X2: x, Y1: y + 9, Y2: y + 9, Stroke: Stroke{Color: "#777", Dash: "1 2"},
					Tip: Tip("backoff " + Fmt(at.Start-prevEnd, "s"))})
			}
			if at.Refused != "" {
				c.group("refusal")
				c.tip(Tip("refuse: " + at.Refused))
				c.add(Path{Stroke: Stroke{Color: "#D55E00", Width: 2.5}, Steps: []Step{{'M', x - 4, y + 3}, {'l', 8, 12}, {'m', 0, -12}, {'l', -8, 12}}},
					Text{X: x + 7, Y: y + 13, Color: ruleInk, Size: 10, S: "refuse: " + at.Refused})
				c.end()
				continue
			}
			col := Palette[0]
			label := at.Seat
			if at.Fallback {
				col = Palette[5]
				label = "fallback " + at.Seat
			}
			wx := math.Max(c.X(at.Start+at.Wait)-x, 1)
			gx := math.Max(c.X(at.Start+at.Wait+at.Gen)-x-wx, 0)
			tip := Tip(fmt.Sprintf("%s: wait %s, gen %s, %s", label, Fmt(at.Wait, "s"), Fmt(at.Gen, "s"), at.Outcome))
			c.group("attempt")
			c.tip(tip)
			c.add(Rect{Class: "wait", X: x, Y: y + 1, W: wx, H: 16, Fill: Fill{Color: col}},
				Rect{Class: "gen", X: x + wx, Y: y + 1, W: gx, H: 16, Fill: Fill{Color: col}, Stroke: Stroke{Color: col}},
				Rect{X: x + wx, Y: y + 1, W: gx, H: 16, Fill: Fill{Pattern: genPattern}})
			tag := at.Outcome
			if at.Fallback {
				tag = "fallback · " + tag
			}
			if wx+gx > 60 {
				c.add(Text{X: x + 3, Y: y + 13, Color: "#fff", Size: 10, S: clip(tag, int((wx+gx)/6))})
			}
			c.end()
			prevEnd = at.Start + at.Wait + at.Gen
		}
		c.end()
	}
	// Key: wait solid, gen hatched, fallback vermillion, refusal cross.
	c.group("legend")
	c.add(Rect{X: c.w - 330, Y: 25, W: 18, H: 11, Fill: Fill{Color: Palette[0]}}, Text{X: c.w - 308, Y: 35, S: "wait"},
		Rect{X: c.w - 270, Y: 25, W: 18, H: 11, Fill: Fill{Color: Palette[0]}}, Rect{X: c.w - 270, Y: 25, W: 18, H: 11, Fill: Fill{Pattern: genPattern}},
		Text{X: c.w - 248, Y: 35, S: "gen"},
		Rect{X: c.w - 210, Y: 25, W: 18, H: 11, Fill: Fill{Color: Palette[5]}}, Text{X: c.w - 188, Y: 35, S: "fallback seat"},
		Path{Stroke: Stroke{Color: "#D55E00", Width: 2.5}, Steps: []Step{{'M', c.w - 100, 25}, {'l', 8, 11}, {'m', 0, -11}, {'l', -8, 11}}},
		Text{X: c.w - 88, Y: 35, S: "refusal"})
	c.end()
	return c.finish()
}

func clip(s string, n int) string {
	r := []rune(s)
	if n < 2 {
		return ""
	}
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
