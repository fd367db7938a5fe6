package chart

import (
	"fmt"
	"io"
	"math"
)

// TimelineJob is one job's attempts, in seconds from its first submit.
type TimelineJob struct {
	ID       string
	End      string // succeeded, failed, unknown, or "" when the log never said
	Attempts []TimelineAttempt
}

// TimelineAttempt is one row of a job: a sent attempt (wait then gen) or a
// refusal (a mark with its reason).
type TimelineAttempt struct {
	Start    float64 // seconds from the job's first submit
	Wait     float64
	Gen      float64
	Seat     string
	Outcome  string
	Fallback bool
	Refused  string // the refusal's reason; the attempt was not sent
}

// Timeline draws jobs one per lane.
type Timeline struct {
	Title string
	Jobs  []TimelineJob
}

// Write draws the lanes: each attempt a bar, its wait solid and its gen
// hatched, backoff sleeps the gaps between them, refusals a cross with
// their reason, and attempts on a fallback seat in vermillion and marked
// "fallback".
func (ch Timeline) Write(w io.Writer) error {
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
		fmt.Fprintf(&c.b, `<g class="lane" data-job="%s"><text x="%s" y="%s" text-anchor="end" fill="%s">%s · %s</text>`,
			esc(j.ID), num(c.left-6), num(y+13), ink, esc(clip(j.ID, 14)), esc(end))
		prevEnd := math.NaN()
		for _, at := range j.Attempts {
			x := c.X(at.Start)
			if !math.IsNaN(prevEnd) && at.Start > prevEnd {
				fmt.Fprintf(&c.b, `<line class="backoff" x1="%s" x2="%s" y1="%s" y2="%s" stroke="#777" stroke-dasharray="1 2"><title>backoff %s</title></line>`,
					num(c.X(prevEnd)), num(x), num(y+9), num(y+9), esc(Fmt(at.Start-prevEnd, "s")))
			}
			if at.Refused != "" {
				fmt.Fprintf(&c.b, `<g class="refusal"><path d="M%s,%s l8,12 m0,-12 l-8,12" stroke="#D55E00" stroke-width="2.5"/><text x="%s" y="%s" fill="#A33B00" font-size="10">refuse: %s</text><title>refuse: %s</title></g>`,
					num(x-4), num(y+3), num(x+7), num(y+13), esc(at.Refused), esc(at.Refused))
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
			tip := fmt.Sprintf("%s: wait %s, gen %s, %s", label, Fmt(at.Wait, "s"), Fmt(at.Gen, "s"), at.Outcome)
			fmt.Fprintf(&c.b, `<g class="attempt"><rect class="wait" x="%s" y="%s" width="%s" height="16" fill="%s"/><rect class="gen" x="%s" y="%s" width="%s" height="16" fill="%s" stroke="%s"/><rect x="%s" y="%s" width="%s" height="16" fill="url(#p-gen)"/><title>%s</title>`,
				num(x), num(y+1), num(wx), col, num(x+wx), num(y+1), num(gx), col, col, num(x+wx), num(y+1), num(gx), esc(tip))
			tag := at.Outcome
			if at.Fallback {
				tag = "fallback · " + tag
			}
			if wx+gx > 60 {
				fmt.Fprintf(&c.b, `<text x="%s" y="%s" fill="#fff" font-size="10">%s</text>`, num(x+3), num(y+13), esc(clip(tag, int((wx+gx)/6))))
			}
			c.b.WriteString(`</g>`)
			prevEnd = at.Start + at.Wait + at.Gen
		}
		c.b.WriteString(`</g>`)
	}
	// Key: wait solid, gen hatched, fallback vermillion, refusal cross.
	fmt.Fprintf(&c.b, `<g class="legend"><rect x="%[1]s" y="25" width="18" height="11" fill="%[2]s"/><text x="%[3]s" y="35">wait</text><rect x="%[4]s" y="25" width="18" height="11" fill="%[2]s"/><rect x="%[4]s" y="25" width="18" height="11" fill="url(#p-gen)"/><text x="%[5]s" y="35">gen</text><rect x="%[6]s" y="25" width="18" height="11" fill="%[7]s"/><text x="%[8]s" y="35">fallback seat</text><path d="M%[9]s,25 l8,11 m0,-11 l-8,11" stroke="#D55E00" stroke-width="2.5"/><text x="%[10]s" y="35">refusal</text></g>`,
		num(c.w-330), Palette[0], num(c.w-308), num(c.w-270), num(c.w-248), num(c.w-210), Palette[5], num(c.w-188), num(c.w-100), num(c.w-88))
	return c.finish(w)
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
