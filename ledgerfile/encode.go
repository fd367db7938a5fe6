package ledgerfile

import (
	"bytes"
	"math"
	"strconv"
	"time"

	"github.com/go-logfmt/logfmt"

	"retrygate/admit"
)

// AppendRow appends r as one logfmt line, newline included, to dst.
// Keys come in a fixed order so that a reviewer's eye finds them; absent
// values are left out.
func AppendRow(dst []byte, r *Row) []byte {
	buf := bytes.NewBuffer(dst)
	enc := logfmt.NewEncoder(buf)
	kv := func(k string, v string) { _ = enc.EncodeKeyval(k, v) }
	var num [32]byte
	sec := func(k string, d time.Duration) { kv(k, string(appendSeconds(num[:0], d))) }
	integer := func(k string, n int64) { kv(k, string(strconv.AppendInt(num[:0], n, 10))) }

	if !r.TS.IsZero() {
		kv("ts", r.TS.UTC().Format(time.RFC3339Nano))
	}
	if r.Job != "" {
		kv("job", r.Job)
	}
	if r.Attempt > 0 {
		integer("attempt", int64(r.Attempt))
	}
	if r.Seat != "" {
		kv("seat", r.Seat)
	}
	if r.Model != "" {
		kv("model", r.Model)
	}
	sec("wait_s", r.Wait)
	if r.HasTTFB {
		sec("ttfb_s", r.TTFB)
	}
	sec("elapsed_s", r.Elapsed)
	integer("tokens", r.Tokens)
	if r.HasSplit {
		integer("prompt_tokens", r.PromptTokens)
		integer("completion_tokens", r.CompletionTokens)
	}
	if r.TokensFrom != "" {
		kv("tokens_from", r.TokensFrom)
	}
	if r.Outcome != "" {
		kv("outcome", string(r.Outcome))
	}
	if r.HTTPStatus != 0 {
		integer("http_status", int64(r.HTTPStatus))
	}
	if r.Billing != "" {
		kv("billing", string(r.Billing))
	}
	if r.HasCost {
		kv("cost_usd", formatUSD(r.CostUSD))
	}
	if r.ReserveUSD > 0 {
		kv("reserve_usd", formatUSD(r.ReserveUSD))
	}
	if r.HasRetryAfter {
		sec("retry_after_s", r.RetryAfter)
	}
	if r.ErrorCode != "" {
		kv("error_code", r.ErrorCode)
	}
	if r.Delay > 0 {
		sec("delay_s", r.Delay)
	}
	if r.HasSpent {
		sec("spent_s", r.SpentS)
		integer("spent_tokens", r.SpentTokens)
		if r.SpentUSD != 0 {
			kv("spent_usd", formatUSD(r.SpentUSD))
		}
		integer("used", int64(r.Used))
	}
	if r.Decision != "" {
		kv("decision", r.Decision)
	}
	if r.Unsent {
		kv("sent", "false")
	}
	if r.Holdout {
		kv("holdout", "true")
	}
	if r.Fallback {
		kv("fallback", "true")
	}
	if r.JobEnd != "" {
		kv("job_end", r.JobEnd)
	}
	if r.PromptSHA != "" {
		kv("prompt_sha", r.PromptSHA)
	}
	if r.Note != "" {
		kv("note", r.Note)
	}
	for _, e := range r.Extra {
		kv(e.Key, e.Value)
	}
	_ = enc.EndRecord()
	return buf.Bytes()
}

// FormatRow is AppendRow into a new string, without the newline.
func FormatRow(r *Row) string {
	b := AppendRow(nil, r)
	return string(b[:len(b)-1])
}

// appendSeconds writes d as seconds with exactly 3 decimals: 1.2s → "1.200".
func appendSeconds(dst []byte, d time.Duration) []byte {
	ms := d.Round(time.Millisecond).Milliseconds()
	if ms < 0 {
		dst = append(dst, '-')
		ms = -ms
	}
	dst = strconv.AppendInt(dst, ms/1000, 10)
	frac := ms % 1000
	dst = append(dst, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	return dst
}

// FormatSeconds is the log's way of writing a duration: "7.200".
func FormatSeconds(d time.Duration) string { return string(appendSeconds(nil, d)) }

func formatUSD(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Resolution rounds d to what the log holds (milliseconds) and into
// [0, admit.MaxDuration]. The attempt loop decides on rounded numbers, so
// a replay of its log sees exactly what it saw.
func Resolution(d time.Duration) time.Duration {
	return admit.ClampDuration(d.Round(time.Millisecond))
}
