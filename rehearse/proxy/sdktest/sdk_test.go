package sdktest

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/proxy"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

func openaiClient(base string, retries int, rt http.RoundTripper, opts ...option.RequestOption) openai.Client {
	o := []option.RequestOption{option.WithBaseURL(base + "/v1"), option.WithAPIKey(plantedKey), option.WithMaxRetries(retries)}
	if rt != nil {
		o = append(o, option.WithHTTPClient(&http.Client{Transport: rt}))
	}
	return openai.NewClient(append(o, opts...)...)
}

func anthropicClient(origin string, retries int, rt http.RoundTripper, opts ...aoption.RequestOption) anthropic.Client {
	o := []aoption.RequestOption{aoption.WithoutEnvironmentDefaults(), aoption.WithBaseURL(origin),
		aoption.WithAPIKey(plantedKey), aoption.WithMaxRetries(retries)}
	if rt != nil {
		o = append(o, aoption.WithHTTPClient(&http.Client{Transport: rt}))
	}
	return anthropic.NewClient(append(o, opts...)...)
}

func openaiParams(usage bool) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	}
	if usage {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	return p
}

func anthropicParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 256,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
	}
}

func openaiStream(t *testing.T, c openai.Client, opts ...option.RequestOption) openai.ChatCompletionAccumulator {
	t.Helper()
	s := c.Chat.Completions.NewStreaming(context.Background(), openaiParams(true), opts...)
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		require.True(t, acc.AddChunk(s.Current()))
	}
	require.NoError(t, s.Err())
	return acc
}

func anthropicStream(t *testing.T, c anthropic.Client) anthropic.Message {
	t.Helper()
	s := c.Messages.NewStreaming(context.Background(), anthropicParams())
	var msg anthropic.Message
	for s.Next() {
		require.NoError(t, msg.Accumulate(s.Current()))
	}
	require.NoError(t, s.Err())
	return msg
}

// The OpenAI SDK streams and doesn't stream through the proxy; the bytes
// it reads are the ones it reads without the proxy; each call is a row.
func TestOpenAIThroughProxy(t *testing.T) {
	direct, _ := upstream(t, seatserver.OpenAI, okPlan, okPlan)
	behind, _ := upstream(t, seatserver.OpenAI, okPlan, okPlan)
	pxURL, log := front(t, "openai", behind, policy())

	recD, recP := &recorder{}, &recorder{}
	want := openaiStream(t, openaiClient(direct, 0, recD))
	got := openaiStream(t, openaiClient(pxURL, 0, recP))
	assert.Equal(t, recD.last(), recP.last(), "streamed bytes identical with and without the proxy")
	assert.Equal(t, want.Choices[0].Message.Content, got.Choices[0].Message.Content)
	assert.Equal(t, int64(30), got.Usage.CompletionTokens)

	oc := openaiClient(pxURL, 0, nil)
	cc, err := oc.Chat.Completions.New(context.Background(), openaiParams(false))
	require.NoError(t, err)
	assert.Equal(t, int64(42), cc.Usage.PromptTokens)

	rows := log.wait(t, 2)
	for _, r := range rows {
		assert.Equal(t, admit.OK, r.Outcome)
		assert.Equal(t, "usage", r.TokensFrom)
		assert.Equal(t, int64(72), r.Tokens)
		assert.Equal(t, "succeeded", r.JobEnd)
		assert.Equal(t, "0", extra(r), "the SDK's retry counter is on the row")
	}
	assert.NotContains(t, log.String(), "SECRET")
	assert.NotContains(t, log.String(), "PROMPT-CANARY")
}

func TestAnthropicThroughProxy(t *testing.T) {
	direct, _ := upstream(t, seatserver.Anthropic, okPlan)
	behind, _ := upstream(t, seatserver.Anthropic, okPlan, okPlan)
	pxURL, log := front(t, "anthropic", behind, policy())

	recD, recP := &recorder{}, &recorder{}
	want := anthropicStream(t, anthropicClient(direct, 0, recD))
	got := anthropicStream(t, anthropicClient(pxURL, 0, recP))
	assert.Equal(t, recD.last(), recP.last(), "streamed bytes identical with and without the proxy")
	assert.Equal(t, want.Content[0].Text, got.Content[0].Text)
	assert.Equal(t, int64(30), got.Usage.OutputTokens)

	ac := anthropicClient(pxURL, 0, nil)
	msg, err := ac.Messages.New(context.Background(), anthropicParams())
	require.NoError(t, err)
	assert.Equal(t, int64(42), msg.Usage.InputTokens)

	rows := log.wait(t, 2)
	for _, r := range rows {
		assert.Equal(t, admit.OK, r.Outcome)
		assert.Equal(t, "usage", r.TokensFrom)
		assert.Equal(t, int64(72), r.Tokens)
	}
	assert.NotContains(t, log.String(), "SECRET")
}

func extra(r ledgerfile.Row) string {
	for _, kv := range r.Extra {
		if kv.Key == proxy.KeyClientRetry {
			return kv.Value
		}
	}
	return ""
}

// fail500 is a fast 500 that asks for a short wait, so the SDKs retry soon.
var fail500 = seat.Plan{Status: 500, Elapsed: 5 * ms, RetryAfter: 10 * ms, HasRetryAfter: true}

// A job over its attempt cap gets a 503 the SDK reports as its API error,
// with the reason in the message; the SDK's own retries are rows with
// their retry count, and it does not retry the refusal.
func TestOpenAIAttemptCap(t *testing.T) {
	behind, srv := upstream(t, seatserver.OpenAI, fail500)
	pxURL, log := front(t, "openai", behind, policy())
	c := openaiClient(pxURL, 5, nil, option.WithHeader("X-Retrygate-Job", "job-1"))
	_, err := c.Chat.Completions.New(context.Background(), openaiParams(false))
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "a typed API error, got %v", err)
	assert.Equal(t, 503, apiErr.StatusCode)
	assert.Equal(t, "attempt_cap", apiErr.Code)
	assert.Contains(t, apiErr.Message, "refuse: attempt cap for job job-1: the job used 2 of 2 attempts")
	assert.Len(t, srv.Requests(), 2, "the refusal never reached the provider")

	rows := log.wait(t, 3)
	require.Len(t, rows, 3, "two sent, then the SDK's third try, refused; it stopped there")
	for i, want := range []struct{ decision, retry, end string }{
		{"admit", "0", ""}, {"admit", "1", ""}, {"refuse: attempt cap", "2", "failed"},
	} {
		assert.Equal(t, "job-1", rows[i].Job)
		assert.Equal(t, want.decision, rows[i].Decision, "row %d", i)
		assert.Equal(t, want.retry, extra(rows[i]), "row %d", i)
		assert.Equal(t, want.end, rows[i].JobEnd, "row %d", i)
	}
}

func TestAnthropicAttemptCap(t *testing.T) {
	behind, _ := upstream(t, seatserver.Anthropic, fail500)
	pxURL, log := front(t, "anthropic", behind, policy())
	c := anthropicClient(pxURL, 5, nil, aoption.WithHeader("X-Retrygate-Job", "job-2"))
	_, err := c.Messages.New(context.Background(), anthropicParams())
	var apiErr *anthropic.Error
	require.True(t, errors.As(err, &apiErr), "a typed API error, got %v", err)
	assert.Equal(t, 503, apiErr.StatusCode)
	assert.Contains(t, apiErr.Error(), "refuse: attempt cap for job job-2")
	assert.Len(t, log.wait(t, 3), 3)
}

// A job whose deadline is gone gets 504, as the SDK's typed error.
func TestDeadlineGone504(t *testing.T) {
	slowRetry := fail500
	slowRetry.RetryAfter = 400 * ms
	behind, _ := upstream(t, seatserver.OpenAI, slowRetry)
	pol := policy()
	pol.Budget.Deadline = 300 * ms
	pol.Budget.MaxAttempts = 5
	pxURL, log := front(t, "openai", behind, pol)
	c := openaiClient(pxURL, 5, nil, option.WithHeader("X-Retrygate-Job", "late"))
	began := time.Now()
	_, err := c.Chat.Completions.New(context.Background(), openaiParams(false))
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "a typed API error, got %v", err)
	assert.Equal(t, 504, apiErr.StatusCode)
	assert.Contains(t, apiErr.Message, "refuse: deadline for job late")
	assert.Less(t, time.Since(began), 3*time.Second, "the SDK stops retrying a refusal no retry can undo")
	rows := log.wait(t, 2)
	assert.Equal(t, "refuse: deadline", rows[len(rows)-1].Decision)
}

// A hanging upstream gives the SDK a bounded 504, never a stuck call.
func TestHangGives504(t *testing.T) {
	behind, _ := upstream(t, seatserver.OpenAI, seat.Plan{Hang: true, TTFB: time.Hour})
	pol := policy()
	pol.Timeouts.Hard = 200 * ms
	pxURL, log := front(t, "openai", behind, pol)
	began := time.Now()
	oc := openaiClient(pxURL, 0, nil)
	_, err := oc.Chat.Completions.New(context.Background(), openaiParams(false))
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "a typed API error, got %v", err)
	assert.Equal(t, 504, apiErr.StatusCode)
	assert.Less(t, time.Since(began), 2*time.Second)
	rows := log.wait(t, 1)
	assert.Equal(t, admit.Timeout, rows[0].Outcome)
}
