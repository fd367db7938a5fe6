package summary

import (
	"cmp"
	"slices"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// BreakerSpan is a time a seat's breaker was open: from its opening to
// its closing (half-open in between is still a span: the breaker refuses
// all but its probes). A log's `# event breaker` lines say when; a log
// without them (a hand-written one, or one written before events) has
// its spans inferred from the rows the gate refused for an open breaker.
type BreakerSpan struct {
	Seat string    `json:"seat"`
	From time.Time `json:"from"`
	// To is the closing, or, for a breaker still open when the log
	// ends, the log's last moment (the latest row end or event).
	To        time.Time `json:"to"`
	StillOpen bool      `json:"still_open,omitempty"`
	// Inferred: no event said so; the span runs from the first to the
	// last of a run of refuse: breaker open rows on the seat with no
	// sent row on it in between.
	Inferred bool `json:"inferred,omitempty"`
}

// breakerAcc gathers the spans, from events and from rows.
type breakerAcc struct {
	events bool                    // the log carries breaker events: they alone say
	open   map[string]*BreakerSpan // per seat, the span an event opened
	spans  []BreakerSpan           // closed spans, from events
	last   time.Time               // the latest row end or event seen

	// inferred, for a log without events: per seat, the run of
	// breaker-open refusals not yet ended by a sent row.
	run      map[string]*BreakerSpan
	inferred []BreakerSpan
}

// AddEvent takes one `# event` line of the log (see ledgerfile.Reader's
// OnEvent); the kinds a summary does not know are skipped.
func (s *Summarizer) AddEvent(e *ledgerfile.Event) {
	if e.Kind != ledgerfile.EventBreaker {
		return
	}
	b := &s.brk
	b.events = true
	if e.TS.After(b.last) {
		b.last = e.TS
	}
	if b.open == nil {
		b.open = map[string]*BreakerSpan{}
	}
	sp := b.open[e.Seat]
	switch {
	case e.To == admit.Closed.String() && sp != nil:
		sp.To = e.TS
		b.spans = append(b.spans, *sp)
		delete(b.open, e.Seat)
	case e.To != admit.Closed.String() && sp == nil:
		b.open[e.Seat] = &BreakerSpan{Seat: e.Seat, From: e.TS}
	}
}

// addRow follows a row for the spans: the log's last moment, and
// the inferred spans of a log without events.
func (b *breakerAcc) addRow(r *ledgerfile.Row) {
	if r.TS.IsZero() {
		return
	}
	end := r.TS.Add(r.Elapsed)
	if end.After(b.last) {
		b.last = end
	}
	if !r.WasSent() && r.Reason() == string(admit.ReasonBreakerOpen) {
		if b.run == nil {
			b.run = map[string]*BreakerSpan{}
		}
		if sp := b.run[r.Seat]; sp != nil {
			sp.To = r.TS
		} else {
			b.run[r.Seat] = &BreakerSpan{Seat: r.Seat, From: r.TS, To: r.TS, Inferred: true}
		}
		return
	}
	if len(b.run) > 0 && r.WasSent() {
		if sp := b.run[r.Seat]; sp != nil {
			b.inferred = append(b.inferred, *sp)
			delete(b.run, r.Seat)
		}
	}
}

// result is the spans, by seat then start, none ending before since.
func (b *breakerAcc) result(since time.Time) []BreakerSpan {
	var out []BreakerSpan
	if b.events {
		out = append(out, b.spans...)
		for _, sp := range b.open {
			sp.To, sp.StillOpen = b.last, true
			out = append(out, *sp)
		}
	} else {
		out = append(out, b.inferred...)
		for _, sp := range b.run {
			out = append(out, *sp)
		}
	}
	if !since.IsZero() {
		out = slices.DeleteFunc(out, func(sp BreakerSpan) bool { return sp.To.Before(since) })
		for i := range out {
			if out[i].From.Before(since) {
				out[i].From = since
			}
		}
	}
	slices.SortFunc(out, func(a, b BreakerSpan) int {
		return cmp.Or(cmp.Compare(a.Seat, b.Seat), a.From.Compare(b.From))
	})
	return out
}
