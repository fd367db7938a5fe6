package rehearse

import (
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// Threshold is one metric's thresholds as the policy file gives them.
type Threshold struct {
	Metric string
	Exprs  []string
}

// PolicyLine is the text of the `# policy` comment a run writes after its
// `# run` line: the effective policy in logfmt, keyed by the config file's
// own key paths (budget.deadline, retry.base_delay, seats.NAME.kind, …),
// then its short hash (the first 12 hex of the SHA-256 of the keys before
// it). A reviewer can check any refusal in the run from the log alone.
// Prices are per million tokens; API keys, URLs and commands are never
// written: a seat is its name, kind and model.
func PolicyLine(run int, p Policy, chain []seat.Config, thresholds []Threshold) string {
	var kvs []ledgerfile.KV
	kv := func(k, v string) { kvs = append(kvs, ledgerfile.KV{Key: k, Value: v}) }
	dur := func(d time.Duration) string { return d.String() }
	num := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	b, r, t, br := p.Budget, p.Retry, p.Timeouts, p.Breaker
	kv("budget.deadline", dur(b.Deadline))
	kv("budget.token_ceiling", strconv.FormatInt(b.TokenCeiling, 10))
	kv("budget.max_attempts", strconv.Itoa(b.MaxAttempts))
	kv("budget.max_wait", dur(b.MaxWait))
	if b.HasSpendCeiling() {
		kv("budget.max_spend_usd", num(b.MaxSpendUSD))
	}
	kv("retry.base_delay", dur(r.BaseDelay))
	kv("retry.max_delay", dur(r.MaxDelay))
	kv("retry.slow_5xx_after", dur(r.SlowServerAfter))
	kv("retry.honor_retry_after", strconv.FormatBool(r.HonorRetryAfter))
	kv("retry.timeouts_retried", strconv.Itoa(r.TimeoutsRetried))
	if rb := r.Budget; rb.Enabled() {
		kv("retry.budget.ratio", num(rb.Ratio))
		kv("retry.budget.min_per_s", num(rb.MinPerSecond))
		kv("retry.budget.window", dur(rb.Window))
	}
	kv("timeouts.soft", dur(t.Soft))
	kv("timeouts.hard", dur(t.Hard))
	kv("breaker.window", dur(br.Window))
	kv("breaker.failure_rate", num(br.FailureRate))
	kv("breaker.min_requests", strconv.Itoa(br.MinRequests))
	kv("breaker.cooldown", dur(br.Cooldown))
	kv("breaker.half_open_probes", strconv.Itoa(br.HalfOpenProbes))
	names := make([]string, len(chain))
	for i, s := range chain {
		names[i] = s.Name
	}
	kv("fallback", strings.Join(names, ","))
	for _, s := range chain {
		kv("seats."+s.Name+".kind", s.Kind)
		if s.API != "" {
			kv("seats."+s.Name+".api", s.API) // the wire it spoke: Chat Completions or the Responses API
		}
		if s.Model != "" {
			kv("seats."+s.Name+".model", s.Model)
		}
		if s.PriceIn != 0 || s.PriceOut != 0 {
			kv("seats."+s.Name+".price_in", num(s.PriceIn))
			kv("seats."+s.Name+".price_out", num(s.PriceOut))
		}
		if s.PriceCachedIn != nil {
			kv("seats."+s.Name+".price_cached_in", num(*s.PriceCachedIn))
		}
		if s.PriceCacheWrite != nil {
			kv("seats."+s.Name+".price_cache_write", num(*s.PriceCacheWrite))
		}
	}
	for _, th := range thresholds {
		kv("thresholds."+th.Metric, strings.Join(th.Exprs, "; "))
	}
	return ledgerfile.PolicyText(run, kvs)
}
