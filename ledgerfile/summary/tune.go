package summary

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// DefaultMargin is the headroom tune puts over the percentiles it reads.
const DefaultMargin = 1.25

// Suggestion is one tuned budget number and what it rests on.
type Suggestion struct {
	Key      string  `json:"key"`      // budget.<key>
	Value    float64 `json:"value"`    // seconds, tokens, attempts or USD
	Observed float64 `json:"observed"` // the percentile read from the log
	Basis    string  `json:"basis"`
	Rows     int64   `json:"rows"` // how many values (attempts or jobs) the percentile rests on
	Warning  string  `json:"warning,omitempty"`
}

// Tuned is tune's suggestion.
type Tuned struct {
	Budget admit.Budget `json:"-"`
	Lines  []Suggestion `json:"suggestions"`
	Margin float64      `json:"margin"`
	// Aside are the sent attempts that produced no content, by outcome:
	// shown beside the wait cap, never read into it (an error's wait is
	// how long the error took, not how long an answer waits).
	Aside []Aside `json:"set_aside"`
}

// Aside is one outcome's attempts left out of the wait cap.
type Aside struct {
	Outcome string `json:"outcome"`
	Rows    int64  `json:"rows"`
	WaitP95 Figure `json:"wait_p95_s"`
}

// Suggest reads the four caps (and a spend ceiling where every sent
// attempt of some job carries cost_usd) from a summary of the rows not
// held out: each a percentile times margin, rounded up — durations to
// 0.1 s, tokens to 100, USD to 0.0001. The attempt cap is a count, so it
// takes no margin: the p95 of attempts per succeeded job, at least 1.
func Suggest(s *Summary, margin float64) (Tuned, error) {
	if margin < 1 || math.IsNaN(margin) || math.IsInf(margin, 0) {
		return Tuned{}, fmt.Errorf("margin %g must be at least 1", margin)
	}
	all := s.All
	if all == nil || all.Attempts == 0 {
		return Tuned{}, errors.New("no sent attempts outside the held-out rows to tune from")
	}
	j := s.Jobs
	if j.TimeToSuccess.Len() == 0 {
		return Tuned{}, errors.New("no job succeeded outside the held-out rows: there is no time-to-success to tune a deadline from")
	}
	t := Tuned{Margin: margin}
	m := fmt.Sprintf("× %g", margin)

	// Each cap is the percentile read, exactly, times margin, rounded up:
	// the observed figure is the decimal the log wrote (a spend of
	// 0.02975955 is that, not 0.02976), and the cap is computed from it.
	cw := s.Content.Wait
	wait, waitR := cw.Percentile(95), cw.PercentileRat(95)
	if cw.Len() == 0 {
		wait, waitR = 0, new(big.Rat)
	}
	t.add(Suggestion{Key: "max_wait", Observed: wait, Value: ceilExact(waitR, margin, "0.1"), Rows: cw.Len(),
		Basis: fmt.Sprintf("p95 wait_s %ss %s, over attempts that produced content (ok, or reset after content)", SecondsText(wait), m)})
	for i, w := range s.Content.Aside {
		if n := w.Len(); n > 0 {
			t.Aside = append(t.Aside, Aside{Outcome: string(admit.Outcomes[i]), Rows: n, WaitP95: Figure(w.Percentile(95))})
		}
	}
	tts := j.TimeToSuccess.Percentile(99)
	t.add(Suggestion{Key: "deadline", Observed: tts, Value: ceilExact(j.TimeToSuccess.PercentileRat(99), margin, "0.1"), Rows: j.TimeToSuccess.Len(),
		Basis: fmt.Sprintf("p99 time-to-success %ss %s, over succeeded jobs", SecondsText(tts), m)})
	tok := j.Tokens.Percentile(99)
	t.add(Suggestion{Key: "token_ceiling", Observed: tok, Value: ceilExact(j.Tokens.PercentileRat(99), margin, "100"), Rows: j.Tokens.Len(),
		Basis: fmt.Sprintf("p99 tokens per job %.0f %s, over jobs", tok, m)})
	aps := j.AttemptsPerSuccess.Percentile(95)
	t.add(Suggestion{Key: "max_attempts", Observed: aps, Value: max(1, math.Ceil(aps)), Rows: j.AttemptsPerSuccess.Len(),
		Basis: fmt.Sprintf("p95 attempts per succeeded job %.0f, no margin (a count), at least 1", aps)})
	if j.USD.Len() > 0 {
		usd := j.USD.Percentile(99)
		if usd > 0 {
			t.add(Suggestion{Key: "max_spend_usd", Observed: usd, Value: ceilExact(j.USD.PercentileRat(99), margin, "0.0001"), Rows: j.USD.Len(),
				Basis: fmt.Sprintf("p99 USD per job %s %s, over %d of %d jobs whose every attempt has cost_usd",
					strconv.FormatFloat(usd, 'f', -1, 64), m, j.USD.Len(), j.Jobs)})
		}
	}
	// A log of instant zero-token answers still needs a budget the gate accepts.
	for i, least := range []float64{0.1, 0.1, 100} {
		if !(t.Lines[i].Value > 0) {
			t.Lines[i].Value = least
		}
	}
	t.Budget = admit.Budget{MaxWait: seconds(t.Lines[0].Value), Deadline: seconds(t.Lines[1].Value),
		TokenCeiling: int64(t.Lines[2].Value), MaxAttempts: int(t.Lines[3].Value)}
	if len(t.Lines) > 4 {
		t.Budget.MaxSpendUSD = t.Lines[4].Value
	}
	for i := range t.Lines {
		noun := "jobs"
		if t.Lines[i].Key == "max_wait" {
			noun = "attempts"
		}
		t.Lines[i].Warning = fewRows(t.Lines[i].Rows, noun)
	}
	return t, nil
}

func (t *Tuned) add(s Suggestion) { t.Lines = append(t.Lines, s) }

func seconds(v float64) time.Duration { return time.Duration(math.Round(v * 1e9)) }

// ceilExact is x × margin rounded up to a multiple of step, exactly (x
// as the log wrote it, margin and step as written: 0.7 × 3 is 2.1, not
// 2.2), as the double nearest that multiple.
func ceilExact(x *big.Rat, margin float64, step string) float64 {
	m, _ := new(big.Rat).SetString(strconv.FormatFloat(margin, 'g', -1, 64))
	st, _ := new(big.Rat).SetString(step)
	q := new(big.Rat).Quo(new(big.Rat).Mul(x, m), st)
	n := new(big.Int).Quo(q.Num(), q.Denom()) // floor, for q >= 0
	if !q.IsInt() {
		n.Add(n, big.NewInt(1))
	}
	f, _ := new(big.Rat).Mul(new(big.Rat).SetInt(n), st).Float64()
	return f
}
