package seatserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/rehearse/realtime"
	"github.com/retrygate/retrygate/rehearse/seat"
	. "github.com/retrygate/retrygate/rehearse/seatserver"
)

// The official openai-go Responses client against an openai seat
// server's /v1/responses, streaming and not.

func responsesParams() responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:           "gpt-5-mini",
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)},
		MaxOutputTokens: openai.Int(256),
	}
}

func TestResponsesSDKStream(t *testing.T) {
	r := serve(t, OpenAI, okPlan)
	client := openaiClient(r.baseURL(OpenAI))
	start := time.Now()
	stream := client.Responses.NewStreaming(context.Background(), responsesParams())
	var types []string
	var text strings.Builder
	var final responses.Response
	seq := int64(-1)
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		assert.Equal(t, seq+1, ev.SequenceNumber, "sequence numbers count up from 0 (%s)", ev.Type)
		seq = ev.SequenceNumber
		switch v := ev.AsAny().(type) {
		case responses.ResponseTextDeltaEvent:
			text.WriteString(v.Delta)
		case responses.ResponseCompletedEvent:
			final = v.Response
		}
	}
	require.NoError(t, stream.Err())
	took := time.Since(start)

	assert.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}, types[:4])
	assert.Equal(t, []string{"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}, types[len(types)-4:])
	assert.Equal(t, filler(0, 30), text.String())
	assert.NotContains(t, text.String(), "PROMPT-CANARY")
	assert.Equal(t, responses.ResponseStatusCompleted, final.Status)
	assert.Equal(t, filler(0, 30), final.OutputText(), "the terminal Response holds the whole output")
	assert.Equal(t, "gpt-5-mini", final.Model)
	assert.Equal(t, int64(42), final.Usage.InputTokens)
	assert.Equal(t, int64(30), final.Usage.OutputTokens)
	assert.Equal(t, int64(72), final.Usage.TotalTokens)
	assert.Zero(t, final.Usage.InputTokensDetails.CachedTokens)
	assert.GreaterOrEqual(t, took, okPlan.Elapsed)
	assert.Less(t, took, realtime.By(okPlan.Elapsed), "a ceiling only a hang reaches: the stream ends with its terminal event")
}

func TestResponsesSDKWholeAndGet(t *testing.T) {
	r := serve(t, OpenAI, okPlan)
	client := openaiClient(r.baseURL(OpenAI))
	start := time.Now()
	resp, err := client.Responses.New(context.Background(), responsesParams())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), okPlan.Elapsed)
	assert.Equal(t, responses.ResponseStatusCompleted, resp.Status)
	assert.Equal(t, filler(0, 30), resp.OutputText())
	assert.Equal(t, int64(42), resp.Usage.InputTokens)
	assert.Equal(t, int64(30), resp.Usage.OutputTokens)

	// GET /v1/responses/{id} reads the same Response back.
	got, err := client.Responses.Get(context.Background(), resp.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	assert.Equal(t, resp.ID, got.ID)
	assert.Equal(t, resp.OutputText(), got.OutputText())
	assert.Equal(t, resp.Usage.OutputTokens, got.Usage.OutputTokens)
	assert.Equal(t, "gpt-5-mini", got.Model)

	_, err = client.Responses.Get(context.Background(), "resp_nope", responses.ResponseGetParams{})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	assert.Equal(t, 1, r.requests(t).Total, "a GET plays no plan")
}

func TestResponsesSDKErrors(t *testing.T) {
	tests := []struct {
		name       string
		plan       seat.Plan
		wantStatus int
		wantCode   string
	}{
		{"rate limited", seat.Plan{Elapsed: 30 * ms, Status: 429, RetryAfter: 1500 * ms, HasRetryAfter: true}, 429, "rate_limit_exceeded"},
		{"context length", seat.Plan{Elapsed: 20 * ms, Status: 400, ErrorCode: "context_length_exceeded"}, 400, "context_length_exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := serve(t, OpenAI, tt.plan)
			client := openaiClient(r.baseURL(OpenAI))
			stream := client.Responses.NewStreaming(context.Background(), responsesParams())
			for stream.Next() {
			}
			var apiErr *openai.Error
			require.ErrorAs(t, stream.Err(), &apiErr)
			assert.Equal(t, tt.wantStatus, apiErr.StatusCode)
			assert.Equal(t, tt.wantCode, apiErr.Code)
		})
	}
}

// TestResponsesSDKFailedInsideStream: an error code on a 200 stream is a
// response.failed event, whose Response carries the code.
func TestResponsesSDKFailedInsideStream(t *testing.T) {
	r := serve(t, OpenAI, seat.Plan{TTFB: 10 * ms, Wait: 10 * ms, Elapsed: 40 * ms, ErrorCode: "server_error"})
	client := openaiClient(r.baseURL(OpenAI))
	stream := client.Responses.NewStreaming(context.Background(), responsesParams())
	var last responses.ResponseStreamEventUnion
	for stream.Next() {
		last = stream.Current()
	}
	require.NoError(t, stream.Err(), "a failed response is an event, not a broken stream")
	failed, ok := last.AsAny().(responses.ResponseFailedEvent)
	require.True(t, ok, "the last event is response.failed, not %s", last.Type)
	assert.Equal(t, responses.ResponseStatusFailed, failed.Response.Status)
	assert.Equal(t, responses.ResponseErrorCodeServerError, failed.Response.Error.Code)
	assert.NotEmpty(t, failed.Response.Error.Message)
}

// TestResponsesSDKIncomplete: a step's incomplete is, to the SDK, a
// response.incomplete event whose Response says why, streamed, and a
// Response of status incomplete, whole.
func TestResponsesSDKIncomplete(t *testing.T) {
	plan := okPlan
	plan.Incomplete = "max_output_tokens"
	r := serve(t, OpenAI, plan)
	client := openaiClient(r.baseURL(OpenAI))
	stream := client.Responses.NewStreaming(context.Background(), responsesParams())
	var last responses.ResponseStreamEventUnion
	for stream.Next() {
		last = stream.Current()
	}
	require.NoError(t, stream.Err())
	inc, ok := last.AsAny().(responses.ResponseIncompleteEvent)
	require.True(t, ok, "the last event is response.incomplete, not %s", last.Type)
	assert.Equal(t, responses.ResponseStatusIncomplete, inc.Response.Status)
	assert.Equal(t, "max_output_tokens", inc.Response.IncompleteDetails.Reason)
	assert.Equal(t, filler(0, 30), inc.Response.OutputText())
	assert.Equal(t, int64(30), inc.Response.Usage.OutputTokens)

	resp, err := client.Responses.New(context.Background(), responsesParams())
	require.NoError(t, err)
	assert.Equal(t, responses.ResponseStatusIncomplete, resp.Status)
	assert.Equal(t, "max_output_tokens", resp.IncompleteDetails.Reason)
}
