package summary

import (
	"fmt"
	"math"
	"strings"
)

// Recommendation is one suggested setting and what it rests on.
type Recommendation struct {
	Key     string `json:"key"`     // the policy key it is for
	Seconds Figure `json:"seconds"` // the suggestion
	Low     Figure `json:"low,omitempty"`
	High    Figure `json:"high,omitempty"`
	Basis   string `json:"basis"` // how it was computed
	Rows    int64  `json:"rows"`  // how many rows it rests on
	Warning string `json:"warning,omitempty"`
}

// Recommend turns the ok attempts' timings into timeouts (seed 002: soft
// near p75, hard at 1.5–2× p99 of your own measured latency) and, when
// maxTokens > 0, the time a max_tokens answer needs (seed 001: ttft +
// max_tokens ÷ rate). Every figure says how many rows it rests on and
// warns below MinRows.
func Recommend(s *Summary, maxTokens int64) []Recommendation {
	ok := s.OK
	n := ok.Elapsed.Len()
	var out []Recommendation
	soft := Recommendation{Key: "timeouts.soft", Seconds: Figure(ok.Elapsed.Percentile(75)), Rows: n,
		Basis: "p75 of elapsed_s over ok attempts (the soft timeout near p75)"}
	p99 := ok.Elapsed.Percentile(99)
	hard := Recommendation{Key: "timeouts.hard", Seconds: Figure(2 * p99), Low: Figure(1.5 * p99), High: Figure(2 * p99), Rows: n,
		Basis: fmt.Sprintf("1.5×–2× p99 of elapsed_s over ok attempts (p99 %s)", secs(p99))}
	out = append(out, soft, hard)
	if maxTokens > 0 {
		r := Recommendation{Key: "timeouts.hard (max_tokens)", Rows: ok.RateRows}
		ttft := ok.Wait.Percentile(95)
		if ok.RateRows == 0 || ok.RateSeconds <= 0 {
			r.Seconds = Figure(math.NaN())
			r.Basis = fmt.Sprintf("ttft + %d ÷ rate: no ok row carries prompt_tokens/completion_tokens with elapsed > wait", maxTokens)
		} else {
			rate := float64(ok.RateTokens) / ok.RateSeconds
			r.Seconds = Figure(ttft + float64(maxTokens)/rate)
			r.Basis = fmt.Sprintf("ttft %s (p95 wait_s of ok attempts) + %d tokens ÷ %.1f tokens/s (Σ completion_tokens ÷ Σ(elapsed_s − wait_s) of ok attempts: the time-to-answer formula)",
				secs(ttft), maxTokens, rate)
		}
		out = append(out, r)
	}
	for i := range out {
		out[i].Warning = fewRows(out[i].Rows, "rows")
	}
	return out
}

func fewRows(n int64, noun string) string {
	switch {
	case n == 0:
		return "no " + noun + " to rest on"
	case n == 1:
		return fmt.Sprintf("rests on 1 %s alone (fewer than %d): a percentile of one value says little", strings.TrimSuffix(noun, "s"), MinRows)
	case n < MinRows:
		return fmt.Sprintf("rests on only %d %s (fewer than %d): a percentile of so few says little", n, noun, MinRows)
	}
	return ""
}

func secs(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return SecondsText(v) + "s"
}
