package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// The Responses API through an openai proxy: POST /v1/responses is an
// attempt, read by the Responses reader; GET /v1/responses/{id} passes.

const responsesStream = `{"model":"m1","input":"PROMPT-CANARY hi","stream":true,"max_output_tokens":64}`

func TestResponsesStreamForwarded(t *testing.T) {
	for _, stream := range []bool{true, false} {
		name := map[bool]string{true: "stream", false: "whole"}[stream]
		t.Run(name, func(t *testing.T) {
			body := responsesStream
			if !stream {
				body = strings.Replace(body, `"stream":true`, `"stream":false`, 1)
			}
			direct, _ := upstreamAt(t, seatserver.OpenAI, okPlan)
			viaBase, _ := upstreamAt(t, seatserver.OpenAI, okPlan)
			px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", viaBase)})
			_, want := post(t, strings.TrimSuffix(direct, "/v1")+"/v1/responses", body)
			resp, got := post(t, px.url+"/v1/responses", body)
			require.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, want, got, "the answer passes through unchanged")
			if stream {
				assert.Contains(t, got, "event: response.completed")
				assert.NotContains(t, got, "[DONE]")
			}
			r := px.rows.wait(t, 1)[0]
			assert.Equal(t, admit.OK, r.Outcome, r.Note)
			assert.Equal(t, "usage", r.TokensFrom, "read from response.completed's usage")
			assert.Equal(t, int64(12), r.PromptTokens)
			assert.Equal(t, int64(8), r.CompletionTokens)
			assert.Equal(t, "succeeded", r.JobEnd)
			assert.Equal(t, "m1", r.Model)
			assert.Greater(t, r.Wait, time.Duration(0))
			assert.GreaterOrEqual(t, r.Elapsed, r.Wait)
			assert.NotContains(t, px.rows.text(), "PROMPT-CANARY")
		})
	}
}

// A Responses request is forwarded as sent: no stream_options (which
// the Responses API refuses) is added to ask for usage.
func TestResponsesBodyForwardedAsSent(t *testing.T) {
	got := make(chan string, 1)
	ln := listen(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.URL.Path + " " + string(b)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":0,\"delta\":\"hi\"}\n\n"+
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1,\"total_tokens\":6}}}\n\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", "http://"+ln.Addr().String()+"/v1")})
	resp, _ := post(t, px.url+"/v1/responses", responsesStream)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "/v1/responses "+responsesStream, <-got)
	r := px.rows.wait(t, 1)[0]
	assert.Equal(t, admit.OK, r.Outcome, r.Note)
	assert.Equal(t, int64(6), r.Tokens)
}

// An incomplete answer is its own outcome on the row, with its reason;
// the job's next request is refused: identical bytes end the same way.
func TestResponsesIncompleteRow(t *testing.T) {
	ln := listen(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":0,\"delta\":\"The answer is\"}\n\n"+
			"event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\",\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"},"+
			"\"usage\":{\"input_tokens\":40,\"input_tokens_details\":{\"cached_tokens\":32},\"output_tokens\":64,\"output_tokens_details\":{\"reasoning_tokens\":60},\"total_tokens\":104}}}\n\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", "http://"+ln.Addr().String()+"/v1")})
	resp, got := post(t, px.url+"/v1/responses", responsesStream, "X-Retrygate-Job", "j1")
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, got, `"reason":"max_output_tokens"`, "the client sees the answer as it came")
	r := px.rows.wait(t, 1)[0]
	assert.Equal(t, admit.Incomplete, r.Outcome)
	assert.Equal(t, "max_output_tokens", r.ErrorCode)
	assert.Equal(t, admit.Billable, r.Billing)
	assert.Equal(t, int64(104), r.Tokens)
	assert.Equal(t, [3]int64{32, 0, 60}, [3]int64{r.CachedTokens, r.CacheWriteTokens, r.ReasoningTokens})

	resp, body := post(t, px.url+"/v1/responses", responsesStream, "X-Retrygate-Job", "j1")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e))
	assert.Equal(t, "permanent_error", e.Error.Code)
	rs := px.rows.wait(t, 2)
	assert.Equal(t, "refuse: permanent error", rs[1].Decision)
}

// A failed response inside a 200 stream is the failure table's class of
// its code; the client gets the stream as it came.
func TestResponsesFailedRow(t *testing.T) {
	base, _ := upstreamAt(t, seatserver.OpenAI, seat.Plan{TTFB: 5 * ms, Wait: 5 * ms, Elapsed: 20 * ms, ErrorCode: "rate_limit_exceeded"})
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	resp, got := post(t, px.url+"/v1/responses", responsesStream)
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, got, "event: response.failed")
	r := px.rows.wait(t, 1)[0]
	assert.Equal(t, admit.RateLimited, r.Outcome, r.Note)
	assert.Equal(t, "rate_limit_exceeded", r.ErrorCode)
}

// GET /v1/responses/{id} passes through to the seat, ungated: no row.
func TestResponsesGetPassesThrough(t *testing.T) {
	base, _ := upstreamAt(t, seatserver.OpenAI, okPlan)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)})
	_, whole := post(t, px.url+"/v1/responses", strings.Replace(responsesStream, `"stream":true`, `"stream":false`, 1))
	var created struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(whole), &created))
	require.NotEmpty(t, created.ID)
	px.rows.wait(t, 1)

	resp, err := http.Get(px.url + "/v1/responses/" + created.ID)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, string(b))
	assert.JSONEq(t, whole, string(b), "the same Response, read back")
	px.stop()
	assert.Len(t, px.rows.all(), 1, "the GET is no attempt")
}
