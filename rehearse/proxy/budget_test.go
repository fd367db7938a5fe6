package proxy

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"retrygate/admit"
	"retrygate/rehearse/seat"
)

// TestRetryBudget503: three jobs' first requests fail; the budget (50%
// of first attempts, no floor) lets one retry through, and the next
// job's retry is refused before it reaches the provider: 503 in the
// provider's shape, the SDKs told not to retry, and a row that carries
// the counts it was judged on, which the replay agrees with. A first
// attempt is never refused by the budget.
func TestRetryBudget503(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.kind, func(t *testing.T) {
			base, srv := upstreamAt(t, k.format, seat.Plan{Status: 500, Elapsed: 5 * ms})
			pol := testPolicy()
			pol.Budget.MaxAttempts = 3
			pol.Breaker.FailureRate = 0
			pol.Retry.Budget = admit.RetryBudgetConfig{Ratio: 0.5, Window: time.Minute}
			px := start(t, pol, []seat.Config{seatCfg("s", k.kind, base)})
			for _, job := range []string{"a", "b", "c"} {
				resp, _ := post(t, px.url+k.path, k.body, "X-Retrygate-Job", job)
				require.Equal(t, 500, resp.StatusCode, "a first attempt is never refused by the budget")
			}
			resp, _ := post(t, px.url+k.path, k.body, "X-Retrygate-Job", "a")
			require.Equal(t, 500, resp.StatusCode, "one retry in 0.5 × 3 first attempts")
			resp, body := post(t, px.url+k.path, k.body, "X-Retrygate-Job", "b")
			require.Equal(t, 503, resp.StatusCode)
			assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
			assert.Equal(t, "retry_budget", resp.Header.Get("X-Retrygate-Refused"))
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &v))
			msg := "retrygate: refuse: retry budget for job b: the retries of every job are over the retry budget (0.5 of first attempts + 0/s over 1m0s)"
			switch k.kind {
			case "openai":
				assert.Equal(t, msg, v["error"].(map[string]any)["message"])
				assert.Equal(t, "retry_budget", v["error"].(map[string]any)["code"])
			case "anthropic":
				assert.Equal(t, msg, v["error"].(map[string]any)["message"])
			case "ollama":
				assert.Equal(t, msg, v["error"])
			}
			assert.Len(t, srv.Requests(), 4, "the refused retry never reached the provider")
			// A new job's first attempt still goes out.
			resp, _ = post(t, px.url+k.path, k.body, "X-Retrygate-Job", "d")
			assert.Equal(t, 500, resp.StatusCode)

			rs := px.rows.wait(t, 6)
			var refused, retried int
			for _, r := range rs {
				switch {
				case r.Decision == "refuse: retry budget":
					refused++
					assert.Equal(t, "b", r.Job)
					assert.True(t, r.Unsent)
					assert.Equal(t, admit.BudgetWindow{Firsts: 3, Retries: 1}, r.Window)
				case r.Attempt == 2:
					retried++
					assert.Equal(t, admit.BudgetWindow{Firsts: 3, Retries: 0}, r.Window)
				}
			}
			assert.Equal(t, 1, refused)
			assert.Equal(t, 1, retried)
			assertReplaysUnchanged(t, pol, rs)
		})
	}
}
