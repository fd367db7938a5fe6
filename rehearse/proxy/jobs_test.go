package proxy

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"retrygate/rehearse"
	"retrygate/rehearse/seat"
	"retrygate/rehearse/seatserver"
)

// A client cannot name its job r<run>-<k>, the proxy's own id for a
// request naming none: such a job would have its books replaced by an
// unnamed request's, get its attempt cap again, and share (job, attempt)
// rows with it. Each (job, attempt) is one row.
func TestNamedJobsNeverTakeTheProxysIDs(t *testing.T) {
	base, _ := upstreamAt(t, seatserver.OpenAI, seat.Plan{Status: 500, Elapsed: 5 * ms})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)}) // run 7, max_attempts 2
	sent := 0
	for i := range 6 {
		kv := []string{headerJob, "r7-1"}
		if i%2 == 1 {
			kv = nil // an unnamed request: the proxy names it r7-<k>
		}
		resp, body := post(t, px.url+"/v1/chat/completions", chatBody, kv...)
		if i%2 == 0 {
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			assert.Equal(t, "invalid_job", resp.Header.Get("X-Retrygate-Refused"))
		}
		if resp.StatusCode == http.StatusInternalServerError {
			sent++
		}
	}
	for _, k := range []string{headerIdem, headerJob} {
		resp, _ := post(t, px.url+"/v1/chat/completions", chatBody, k, "r12-0003")
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, k)
	}
	resp, _ := post(t, px.url+"/v1/chat/completions", chatBody, headerJob, "r7-1x")
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode, "another name is a job's")
	px.stop()
	seen := map[string]bool{}
	for _, r := range px.rows.all() {
		k := fmt.Sprintf("%s/%d", r.Job, r.Attempt)
		require.False(t, seen[k], "two rows for (job, attempt) %s", k)
		seen[k] = true
	}
	assert.Equal(t, 3, sent, "the three unnamed requests, each a job of its own")
}

func TestIsRunJobID(t *testing.T) {
	for id, want := range map[string]bool{
		"r7-1": true, "r12-0003": true, "r0-0": true,
		"r7-1x": false, "r-1": false, "r7-": false, "R7-1": false, "r7_1": false, "rr7-1": false, "r7-1-2": false, "order-1": false,
	} {
		assert.Equal(t, want, rehearse.IsRunJobID(id), id)
	}
}
