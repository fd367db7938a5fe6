package sdktest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

func responsesParams() responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:           "gpt-5-mini",
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)},
		MaxOutputTokens: openai.Int(256),
	}
}

// responsesStream reads a Responses stream to its end: the text of its
// deltas and its terminal Response.
func responsesStream(t *testing.T, c openai.Client, opts ...option.RequestOption) (string, responses.Response) {
	t.Helper()
	s := c.Responses.NewStreaming(context.Background(), responsesParams(), opts...)
	var text strings.Builder
	var final responses.Response
	for s.Next() {
		switch ev := s.Current().AsAny().(type) {
		case responses.ResponseTextDeltaEvent:
			text.WriteString(ev.Delta)
		case responses.ResponseCompletedEvent:
			final = ev.Response
		}
	}
	require.NoError(t, s.Err())
	return text.String(), final
}

// The openai-go Responses client streams and doesn't stream through the
// proxy; the bytes it reads are the ones it reads without the proxy;
// each POST is a row; a GET of a response passes through, no row.
func TestOpenAIResponsesThroughProxy(t *testing.T) {
	direct, _ := upstream(t, seatserver.OpenAI, okPlan)
	behind, _ := upstream(t, seatserver.OpenAI, okPlan, okPlan)
	pxURL, log := front(t, "openai", behind, policy())

	recD, recP := &recorder{}, &recorder{}
	wantText, _ := responsesStream(t, openaiClient(direct, 0, recD))
	gotText, final := responsesStream(t, openaiClient(pxURL, 0, recP))
	assert.Equal(t, recD.last(), recP.last(), "streamed bytes identical with and without the proxy")
	assert.Equal(t, wantText, gotText)
	assert.Equal(t, gotText, final.OutputText())
	assert.Equal(t, int64(30), final.Usage.OutputTokens)

	oc := openaiClient(pxURL, 0, nil)
	resp, err := oc.Responses.New(context.Background(), responsesParams())
	require.NoError(t, err)
	assert.Equal(t, responses.ResponseStatusCompleted, resp.Status)
	assert.Equal(t, int64(42), resp.Usage.InputTokens)

	got, err := oc.Responses.Get(context.Background(), resp.ID, responses.ResponseGetParams{})
	require.NoError(t, err, "GET /v1/responses/{id} passes through")
	assert.Equal(t, resp.OutputText(), got.OutputText())

	rows := log.wait(t, 2)
	for _, r := range rows {
		assert.Equal(t, admit.OK, r.Outcome)
		assert.Equal(t, "usage", r.TokensFrom)
		assert.Equal(t, int64(72), r.Tokens)
		assert.Equal(t, "succeeded", r.JobEnd)
		assert.Equal(t, "0", extra(r), "the SDK's retry counter is on the row")
	}
	assert.Len(t, log.wait(t, 2), 2, "the GET is no row")
	assert.NotContains(t, log.String(), "SECRET")
	assert.NotContains(t, log.String(), "PROMPT-CANARY")
}

// A job whose provider fails every call: the proxy retries it to the
// cap and the Responses client gets the provider's last error, told not
// to retry (it does not: its retry counter stays at 0).
func TestOpenAIResponsesAttemptCap(t *testing.T) {
	behind, srv := upstream(t, seatserver.OpenAI, fail500)
	pxURL, log := front(t, "openai", behind, policy())
	c := openaiClient(pxURL, sdkDefault, nil, option.WithHeader("X-Retrygate-Job", "job-r"))
	_, err := c.Responses.New(context.Background(), responsesParams())
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "a typed API error, got %v", err)
	assert.Equal(t, 500, apiErr.StatusCode)
	assert.Len(t, srv.Requests(), 2, "max_attempts")
	rows := log.wait(t, 3)
	require.Len(t, rows, 3)
	assert.Equal(t, "refuse: attempt cap", rows[2].Decision)
	for _, r := range rows {
		assert.Equal(t, "0", extra(r))
	}
}
