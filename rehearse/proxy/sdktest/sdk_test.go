package sdktest

import (
	"context"
	"errors"
	"net/http"
	"sync"
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

// sdkDefault is a client's retries left at the SDK's own default
// (max_retries 2, in both SDKs).
const sdkDefault = -1

func openaiClient(base string, retries int, rt http.RoundTripper, opts ...option.RequestOption) openai.Client {
	o := []option.RequestOption{option.WithBaseURL(base + "/v1"), option.WithAPIKey(plantedKey)}
	if retries != sdkDefault {
		o = append(o, option.WithMaxRetries(retries))
	}
	if rt != nil {
		o = append(o, option.WithHTTPClient(&http.Client{Transport: rt}))
	}
	return openai.NewClient(append(o, opts...)...)
}

func anthropicClient(origin string, retries int, rt http.RoundTripper, opts ...aoption.RequestOption) anthropic.Client {
	o := []aoption.RequestOption{aoption.WithoutEnvironmentDefaults(), aoption.WithBaseURL(origin), aoption.WithAPIKey(plantedKey)}
	if retries != sdkDefault {
		o = append(o, aoption.WithMaxRetries(retries))
	}
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

// ignoreShouldRetry makes a client that retries whatever the answer
// says, as an SDK that does not read x-should-retry would: it drops the
// header before the SDK sees it.
func ignoreShouldRetry(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err == nil {
		resp.Header.Del("X-Should-Retry")
	}
	return resp, err
}

// sentPerJob counts the rows of each job that went upstream.
func sentPerJob(rows []ledgerfile.Row) map[string]int {
	out := map[string]int{}
	for _, r := range rows {
		if r.WasSent() {
			out[r.Job]++
		}
	}
	return out
}

// With the official SDKs at their default retries (max_retries 2) and a
// provider failing every call, the provider sees at most the policy's
// max_attempts per job: the proxy retries to the cap inside the request
// and answers the provider's last error with x-should-retry: false,
// which both SDKs obey (their retry counter stays at 0). A client that
// retries anyway is counted against the job: refused, never sent.
func TestSDKsDefaultRetriesStayWithinTheCap(t *testing.T) {
	call := map[string]func(pxURL string, job string, anyway bool) (int, error){
		"openai": func(pxURL, job string, anyway bool) (int, error) {
			opts := []option.RequestOption{}
			if job != "" {
				opts = append(opts, option.WithHeader("X-Retrygate-Job", job))
			}
			if anyway {
				opts = append(opts, option.WithMiddleware(ignoreShouldRetry))
			}
			c := openaiClient(pxURL, sdkDefault, nil, opts...)
			_, err := c.Chat.Completions.New(context.Background(), openaiParams(false))
			var apiErr *openai.Error
			if errors.As(err, &apiErr) {
				return apiErr.StatusCode, err
			}
			return 0, err
		},
		"anthropic": func(pxURL, job string, anyway bool) (int, error) {
			opts := []aoption.RequestOption{}
			if job != "" {
				opts = append(opts, aoption.WithHeader("X-Retrygate-Job", job))
			}
			if anyway {
				opts = append(opts, aoption.WithMiddleware(func(req *http.Request, next aoption.MiddlewareNext) (*http.Response, error) {
					return ignoreShouldRetry(req, next)
				}))
			}
			c := anthropicClient(pxURL, sdkDefault, nil, opts...)
			_, err := c.Messages.New(context.Background(), anthropicParams())
			var apiErr *anthropic.Error
			if errors.As(err, &apiErr) {
				return apiErr.StatusCode, err
			}
			return 0, err
		},
	}
	format := map[string]seatserver.Format{"openai": seatserver.OpenAI, "anthropic": seatserver.Anthropic}
	for _, kind := range []string{"openai", "anthropic"} {
		t.Run(kind, func(t *testing.T) {
			behind, srv := upstream(t, format[kind], fail500)
			pol := policy() // max_attempts 2
			pol.Breaker.FailureRate = 0
			pxURL, log := front(t, kind, behind, pol)

			status, err := call[kind](pxURL, "job-1", false)
			require.Error(t, err)
			assert.Equal(t, 500, status, "the provider's last answer, as it came")
			status, _ = call[kind](pxURL, "", false) // a job of its own
			assert.Equal(t, 500, status)
			assert.Equal(t, 4, srv.Total(), "max_attempts per job, whatever the SDK's own retries")

			status, _ = call[kind](pxURL, "job-2", true) // an SDK that retries anyway
			assert.Equal(t, 503, status, "its retries are refused: the job is at its cap")
			assert.Equal(t, 6, srv.Total())

			rows := log.wait(t, 11)
			for job, n := range sentPerJob(rows) {
				assert.LessOrEqual(t, n, pol.Budget.MaxAttempts, "job %s", job)
			}
			var retries []string
			for _, r := range rows {
				switch r.Job {
				case "job-1":
					assert.Equal(t, "0", extra(r), "the SDK did not retry: %s", ledgerfile.FormatRow(&r))
				case "job-2":
					retries = append(retries, extra(r))
				}
			}
			assert.Equal(t, []string{"0", "0", "0", "1", "2"}, retries, "two attempts and a refusal, then the SDK's retries, refused")
		})
	}
}

// A storm of unnamed SDK requests (the SDK default: no job header) that
// retry whatever the answer says stays within the retry budget: each
// SDK retry carries X-Stainless-Retry-Count > 0, and is judged as a
// retry, not a new job's first attempt.
func TestSDKRetryStormWithinTheBudget(t *testing.T) {
	behind, srv := upstream(t, seatserver.OpenAI, fail500)
	pol := policy()
	pol.Breaker.FailureRate = 0
	pol.Retry.Budget = admit.RetryBudgetConfig{Ratio: 0.2, Window: time.Minute}
	pxURL, log := front(t, "openai", behind, pol)
	const calls = 30
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			c := openaiClient(pxURL, sdkDefault, nil, option.WithMiddleware(ignoreShouldRetry))
			_, err := c.Chat.Completions.New(context.Background(), openaiParams(false))
			assert.Error(t, err)
		})
	}
	wg.Wait()
	// 30 first attempts allow 0.2 × 30 = 6 retries in all. Counted as
	// first attempts, the SDKs' 60 retries would have allowed 18 more.
	assert.LessOrEqual(t, srv.Total(), calls+6, "the provider saw the first attempts and the budget's retries")
	rows := log.wait(t, calls)
	clientRetries := 0
	for _, r := range rows {
		if extra(r) != "0" && r.Attempt == 1 {
			clientRetries++
			assert.True(t, r.HasWindow, "an SDK's retry is judged by the budget: %s", ledgerfile.FormatRow(&r))
		}
	}
	assert.Positive(t, clientRetries, "the SDKs retried")
	t.Logf("the provider saw %d requests of %d calls; the SDKs retried %d times", srv.Total(), calls, clientRetries)
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
