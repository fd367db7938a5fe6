package rehearse

import (
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// RowBase is what every row of a job's attempt carries before its
// numbers: who, where, and the job's spend before it (the gate's inputs).
// The attempt loop and the proxy build rows from it with SentRow and
// RefusalRow, so a proxied attempt's row reads exactly like a rehearsed one.
type RowBase struct {
	TS        time.Time
	Job       string
	Attempt   int
	Seat      string
	Model     string
	Delay     time.Duration // slept (or, behind the proxy, waited by the client) before it
	Spent     admit.Spent
	Holdout   bool
	Fallback  bool // a seat other than the chain's first
	PromptSHA string
	Tags      string
	// Reserve is what a first attempt on this seat reserves under a
	// spend ceiling (0 without one).
	Reserve float64
	// InFlight is how many of the job's earlier attempts were in flight
	// when this one was decided (counted in Spent.Attempts).
	InFlight int
	// Window is the retry budget's counts on a retry it judged.
	Window    admit.BudgetWindow
	HasWindow bool
	// Widen: the attempt goes to a larger context window after a
	// context-length error (its row's note names the seat that said it).
	Widen bool
}

func (b *RowBase) fill(r *ledgerfile.Row) {
	// Cleared, then set field by field: a composite literal assigned
	// through r is built in a temporary and copied (the row is large).
	*r = ledgerfile.Row{}
	r.TS, r.Job, r.Attempt, r.Seat, r.Model = b.TS, b.Job, b.Attempt, b.Seat, b.Model
	r.Delay = ledgerfile.Resolution(b.Delay)
	r.SpentS, r.SpentTokens, r.SpentUSD, r.Used, r.HasSpent, r.InFlight = b.Spent.Time, b.Spent.Tokens, b.Spent.USD, b.Spent.Attempts, true, b.InFlight
	r.Holdout, r.Fallback, r.PromptSHA, r.Tags = b.Holdout, b.Fallback, b.PromptSHA, b.Tags
	r.Window, r.HasWindow = b.Window, b.HasWindow
}

// RefusalRow fills r for an attempt refused before sending: its numbers
// are the estimate the gate saw (track's, for the seat).
func RefusalRow(r *ledgerfile.Row, b *RowBase, track *admit.Track, d admit.Decision) {
	b.fill(r)
	n := track.Estimate(b.Seat, b.Reserve)
	r.Wait, r.Elapsed, r.Tokens = n.Wait, n.Elapsed(), n.Tokens
	if !track.Observed(b.Seat) {
		r.ReserveUSD = b.Reserve
	}
	r.Decision = d.String()
	r.Unsent = true
	if len(d.Failing) > 1 {
		also := make([]string, 0, len(d.Failing)-1)
		for _, f := range d.Failing[1:] {
			also = append(also, string(f))
		}
		r.Note = "also: " + strings.Join(also, ", ")
	}
}

// SentRow fills r for an attempt that was sent, from its observation;
// track is the job's books before it (they say whether this seat's first
// attempt reserved spend).
func SentRow(r *ledgerfile.Row, b *RowBase, track *admit.Track, o *seat.Observation, cost float64, priced bool, note string) {
	b.fill(r)
	if b.Widen {
		note = JoinNote(WidenNote(track.LastSeat()), note)
	}
	if o.Model != "" {
		r.Model = o.Model
	}
	r.Elapsed = ledgerfile.Resolution(o.Elapsed)
	wait, _ := o.LoggedWait() // a cut before the first byte: the wait was at least its length
	r.Wait = min(ledgerfile.Resolution(wait), r.Elapsed)
	r.Connect, r.HasConnect = ledgerfile.Resolution(o.Connect), o.HasConnect
	if !track.Observed(b.Seat) {
		r.ReserveUSD = b.Reserve
	}
	r.TTFB, r.HasTTFB = ledgerfile.Resolution(o.TTFB), o.HasTTFB
	r.ITLMean, r.ITLMax, r.HasITL = ledgerfile.Resolution(o.ITLMean), ledgerfile.Resolution(o.ITLMax), o.HasITL
	r.Tokens = o.Tokens()
	r.PromptTokens, r.CompletionTokens = o.PromptTokens, o.CompletionTokens
	r.HasSplit = o.TokensFrom != ""
	r.TokensFrom, r.PromptFrom, r.CompletionFrom = o.TokensFrom, o.PromptFrom, o.CompletionFrom
	r.CachedTokens, r.CacheWriteTokens, r.ReasoningTokens = o.CachedTokens, o.CacheWriteTokens, o.ReasoningTokens
	r.HasCached, r.HasCacheWrite, r.HasReasoning = o.HasCached, o.HasCacheWrite, o.HasReasoning
	r.Outcome, r.HTTPStatus, r.Billing = o.Outcome, o.HTTPStatus, o.Billing
	r.CostUSD, r.HasCost = cost, priced
	r.RetryAfter, r.HasRetryAfter = ledgerfile.Resolution(o.RetryAfter), o.HasRetryAfter
	r.RateLimit = o.RateLimit
	r.RateLimit.Reset = ledgerfile.Resolution(o.RateLimit.Reset)
	r.ErrorCode = o.ErrorCode
	r.Decision = "admit"
	if o.Outcome == admit.WaitCap {
		// The gate's wait cap, enforced live: the attempt went out and was
		// cancelled when no first byte came within budget.max_wait.
		r.Decision = admit.Refuse(admit.ReasonQueueWait).String()
	}
	r.Note = note
}

// PriceCache fills a sent row's uncached_usd: what its attempt would have
// cost with every input token at price_in, on a priced seat whose answer
// reported cache parts. The loop and the proxy call it after SentRow.
func PriceCache(r *ledgerfile.Row, cfg *seat.Config, o *seat.Observation) {
	if r.HasCost && (o.HasCached || o.HasCacheWrite) {
		r.UncachedUSD = cfg.UncachedCost(o.Usage())
	}
}

// RecordBreaker takes an attempt's outcome into its seat's breaker and
// returns the row's note: "half-open probe" when it was one, and the
// seat's detail. The breaker's change of state is not note text: it is an
// event the breaker's onChange hands on (see BreakerEvents). The
// operator's Ctrl-C says nothing about the seat's health and is not
// recorded.
func RecordBreaker(br *admit.Breaker, now time.Time, o *seat.Observation, probe bool) string {
	var note string
	if probe {
		note = "half-open probe"
	}
	if o.Outcome != admit.Cancelled {
		br.Record(now, o.Outcome.SeatFailure())
	}
	return JoinNote(note, o.Detail)
}

// BreakerEvents is the onChange for admit.NewBreaker that hands each
// change of seat's breaker to emit as a `# event breaker` line (the
// attempt loop's, and the proxy's, through a ledgerfile.Writer's Event).
// A nil emit makes a nil onChange.
func BreakerEvents(seat string, emit func(*ledgerfile.Event)) func(at time.Time, from, to admit.BreakerState) {
	if emit == nil {
		return nil
	}
	var e ledgerfile.Event
	return func(at time.Time, from, to admit.BreakerState) {
		e = ledgerfile.Event{Kind: ledgerfile.EventBreaker, Seat: seat, From: from.String(), To: to.String(), TS: at.UTC()}
		emit(&e)
	}
}

// JoinNote joins two parts of a row's note.
func JoinNote(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
