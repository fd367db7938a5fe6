package seatserver_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/rehearse/realtime"
	"github.com/retrygate/retrygate/rehearse/seat"
	. "github.com/retrygate/retrygate/rehearse/seatserver"
)

// The official SDKs are the judges of the wire formats: if they read a
// response as the API's own, the server speaks the protocol.

const plantedKey = "sk-planted-SECRET-7f3c9a1e4b"

const prompt = "PROMPT-CANARY: summarize the quarterly report"

func openaiClient(base string) openai.Client {
	return openai.NewClient(option.WithBaseURL(base), option.WithAPIKey(plantedKey), option.WithMaxRetries(0))
}

func anthropicClient(origin string) anthropic.Client {
	return anthropic.NewClient(aoption.WithoutEnvironmentDefaults(),
		aoption.WithBaseURL(origin), aoption.WithAPIKey(plantedKey), aoption.WithMaxRetries(0))
}

func openaiParams(includeUsage bool) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	}
	if includeUsage {
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

func TestOpenAISDKStream(t *testing.T) {
	tests := []struct {
		name         string
		plan         seat.Plan
		includeUsage bool
		wantUsage    bool
	}{
		{"usage asked and given", okPlan, true, true},
		{"usage not asked", okPlan, false, false},
		{"usage asked, plan has none", func() seat.Plan { p := okPlan; p.NoUsage = true; return p }(), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := serve(t, OpenAI, tt.plan)
			client := openaiClient(r.baseURL(OpenAI))
			start := time.Now()
			stream := client.Chat.Completions.NewStreaming(context.Background(), openaiParams(tt.includeUsage))
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				require.True(t, acc.AddChunk(stream.Current()))
			}
			require.NoError(t, stream.Err())
			took := time.Since(start)

			require.Len(t, acc.Choices, 1)
			assert.Equal(t, filler(0, tt.plan.CompletionTokens), acc.Choices[0].Message.Content)
			assert.Equal(t, "stop", acc.Choices[0].FinishReason)
			assert.Equal(t, "gpt-4o-mini", acc.Model)
			assert.NotContains(t, acc.Choices[0].Message.Content, "PROMPT-CANARY")
			if tt.wantUsage {
				assert.Equal(t, int64(42), acc.Usage.PromptTokens)
				assert.Equal(t, int64(30), acc.Usage.CompletionTokens)
				assert.Equal(t, int64(72), acc.Usage.TotalTokens)
			} else {
				assert.Zero(t, acc.Usage.TotalTokens)
			}
			assert.GreaterOrEqual(t, took, tt.plan.Elapsed)
			assert.Less(t, took, realtime.By(tt.plan.Elapsed), "a ceiling only a hang reaches")
		})
	}
}

func TestOpenAISDKWhole(t *testing.T) {
	r := serve(t, OpenAI, okPlan)
	client := openaiClient(r.baseURL(OpenAI))
	start := time.Now()
	cc, err := client.Chat.Completions.New(context.Background(), openaiParams(false))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), okPlan.Elapsed)
	require.Len(t, cc.Choices, 1)
	assert.Equal(t, filler(0, 30), cc.Choices[0].Message.Content)
	assert.Equal(t, int64(42), cc.Usage.PromptTokens)
	assert.Equal(t, int64(30), cc.Usage.CompletionTokens)
}

func TestOpenAISDKErrors(t *testing.T) {
	tests := []struct {
		name       string
		plan       seat.Plan
		wantStatus int
		wantCode   string
		wantType   string
		retryAfter string // Retry-After header
		retryMS    string // retry-after-ms header
	}{
		{"rate limited with retry-after", seat.Plan{Elapsed: 30 * ms, Status: 429, RetryAfter: 1500 * ms, HasRetryAfter: true},
			429, "rate_limit_exceeded", "requests", "2", "1500"},
		{"context length", seat.Plan{Elapsed: 20 * ms, Status: 400, ErrorCode: "context_length_exceeded"},
			400, "context_length_exceeded", "invalid_request_error", "", ""},
		{"quota", seat.Plan{Elapsed: 20 * ms, Status: 429, ErrorCode: "insufficient_quota"},
			429, "insufficient_quota", "insufficient_quota", "", ""},
		{"fast 503", seat.Plan{Elapsed: 20 * ms, Status: 503}, 503, "", "server_error", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := serve(t, OpenAI, tt.plan)
			client := openaiClient(r.baseURL(OpenAI))
			stream := client.Chat.Completions.NewStreaming(context.Background(), openaiParams(true))
			for stream.Next() {
			}
			var apiErr *openai.Error
			require.ErrorAs(t, stream.Err(), &apiErr)
			assert.Equal(t, tt.wantStatus, apiErr.StatusCode)
			assert.Equal(t, tt.wantCode, apiErr.Code)
			assert.Equal(t, tt.wantType, apiErr.Type)
			assert.NotEmpty(t, apiErr.Message)
			assert.Equal(t, tt.retryAfter, apiErr.Response.Header.Get("Retry-After"))
			assert.Equal(t, tt.retryMS, apiErr.Response.Header.Get("retry-after-ms"))
			rec := r.requests(t).Requests[0]
			assert.Equal(t, tt.wantStatus, rec.Status)
			assert.Equal(t, StateFinished, rec.State)
		})
	}
}

func TestOpenAISDKErrorInsideStream(t *testing.T) {
	r := serve(t, OpenAI, seat.Plan{TTFB: 10 * ms, Wait: 10 * ms, Elapsed: 40 * ms, ErrorCode: "server_error"})
	client := openaiClient(r.baseURL(OpenAI))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openaiParams(true))
	var chunks int
	for stream.Next() {
		chunks++ // the role-only chunk
	}
	var se *ssestream.StreamError
	require.ErrorAs(t, stream.Err(), &se)
	assert.Contains(t, se.Message, "server_error")
	assert.Equal(t, 1, chunks)
}

func TestOpenAISDKReset(t *testing.T) {
	plan := seat.Plan{Wait: 20 * ms, Elapsed: 200 * ms, ResetAfter: 80 * ms, CompletionTokens: 40, PromptTokens: 5}
	r := serve(t, OpenAI, plan)
	client := openaiClient(r.baseURL(OpenAI))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openaiParams(true))
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.Error(t, stream.Err(), "a dropped connection is an error, not a clean end")
	require.Len(t, acc.Choices, 1)
	got := acc.Choices[0].Message.Content
	assert.NotEmpty(t, got, "some content came before the reset")
	assert.True(t, strings.HasPrefix(filler(0, 40), got))
	assert.Less(t, len(got), len(filler(0, 40)))
	rec := r.requests(t).Requests[0]
	assert.Equal(t, StateReset, rec.State)
	assert.True(t, rec.Finished)
	assert.False(t, rec.Cancelled)
}

func TestOpenAISDKConnError(t *testing.T) {
	r := serve(t, OpenAI, seat.Plan{ConnError: true}, okPlan)
	client := openaiClient(r.baseURL(OpenAI))
	_, err := client.Chat.Completions.New(context.Background(), openaiParams(false))
	require.Error(t, err)
	var apiErr *openai.Error
	assert.False(t, errors.As(err, &apiErr), "no HTTP response at all: %v", err)
	rec := r.requests(t).Requests[0]
	assert.Equal(t, StateDropped, rec.State)
	assert.Zero(t, rec.Status)
	// The next request plays the next plan.
	cc, err := client.Chat.Completions.New(context.Background(), openaiParams(false))
	require.NoError(t, err)
	assert.Equal(t, filler(0, 30), cc.Choices[0].Message.Content)
}

func TestAnthropicSDKStream(t *testing.T) {
	tests := []struct {
		name      string
		plan      seat.Plan
		wantUsage bool
	}{
		{"usage", okPlan, true},
		{"no usage", func() seat.Plan { p := okPlan; p.NoUsage = true; return p }(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := serve(t, Anthropic, tt.plan)
			// The SDK appends v1/messages to its base URL: give it the origin.
			client := anthropicClient(r.origin)
			start := time.Now()
			stream := client.Messages.NewStreaming(context.Background(), anthropicParams())
			var msg anthropic.Message
			var types []string
			for stream.Next() {
				ev := stream.Current()
				types = append(types, ev.Type)
				require.NoError(t, msg.Accumulate(ev))
			}
			require.NoError(t, stream.Err())
			took := time.Since(start)

			require.Len(t, msg.Content, 1)
			assert.Equal(t, filler(0, 30), msg.Content[0].Text)
			assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
			assert.Equal(t, "message_start", types[0])
			assert.Equal(t, "message_stop", types[len(types)-1])
			if tt.wantUsage {
				assert.Equal(t, int64(42), msg.Usage.InputTokens)
				assert.Equal(t, int64(30), msg.Usage.OutputTokens, "message_delta's cumulative count replaces message_start's")
			} else {
				assert.Zero(t, msg.Usage.InputTokens)
				assert.Zero(t, msg.Usage.OutputTokens)
			}
			assert.GreaterOrEqual(t, took, tt.plan.Elapsed)
			assert.Less(t, took, realtime.By(tt.plan.Elapsed), "a ceiling only a hang reaches")
		})
	}
}

func TestAnthropicSDKWhole(t *testing.T) {
	r := serve(t, Anthropic, okPlan)
	client := anthropicClient(r.origin)
	msg, err := client.Messages.New(context.Background(), anthropicParams())
	require.NoError(t, err)
	require.Len(t, msg.Content, 1)
	assert.Equal(t, filler(0, 30), msg.Content[0].Text)
	assert.Equal(t, int64(42), msg.Usage.InputTokens)
	assert.Equal(t, int64(30), msg.Usage.OutputTokens)
}

func TestAnthropicSDKErrors(t *testing.T) {
	tests := []struct {
		name       string
		plan       seat.Plan
		wantStatus int
		wantType   string
		retryAfter string
	}{
		{"overloaded 529", seat.Plan{Elapsed: 20 * ms, Status: 529, ErrorCode: "overloaded_error"}, 529, "overloaded_error", ""},
		{"rate limited", seat.Plan{Elapsed: 20 * ms, Status: 429, RetryAfter: 3 * time.Second, HasRetryAfter: true}, 429, "rate_limit_error", "3"},
		{"bad request", seat.Plan{Elapsed: 20 * ms, Status: 400}, 400, "invalid_request_error", ""},
		{"server error", seat.Plan{Elapsed: 20 * ms, Status: 500}, 500, "api_error", ""},
		// An overloaded_error event inside a 200 stream: the SDK still hands
		// back its typed error, with the stream's status.
		{"error event mid-stream", seat.Plan{TTFB: 10 * ms, Wait: 10 * ms, Elapsed: 40 * ms, ErrorCode: "overloaded_error"}, 200, "overloaded_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := serve(t, Anthropic, tt.plan)
			client := anthropicClient(r.origin)
			stream := client.Messages.NewStreaming(context.Background(), anthropicParams())
			for stream.Next() {
			}
			var apiErr *anthropic.Error
			require.ErrorAs(t, stream.Err(), &apiErr)
			assert.Equal(t, tt.wantStatus, apiErr.StatusCode)
			assert.Equal(t, tt.wantType, string(apiErr.Type()))
			assert.NotEmpty(t, apiErr.Message)
			if tt.retryAfter != "" {
				assert.Equal(t, tt.retryAfter, apiErr.Response.Header.Get("Retry-After"))
			}
		})
	}
}

// Ollama has no official Go SDK in go.mod; its wire format is checked
// against the documented NDJSON shape and by our own seat (seats_test.go).
func TestOllamaNDJSON(t *testing.T) {
	r := serve(t, Ollama, okPlan)
	resp, err := http.Post(r.baseURL(Ollama)+"/api/chat", "application/json",
		strings.NewReader(`{"model":"llama3.2","messages":[{"role":"user","content":"`+prompt+`"}]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	lines := decodeNDJSON(t, resp)
	require.GreaterOrEqual(t, len(lines), 2)
	var text strings.Builder
	for _, l := range lines[:len(lines)-1] {
		assert.Equal(t, false, l["done"])
		assert.Equal(t, "llama3.2", l["model"])
		text.WriteString(l["message"].(map[string]any)["content"].(string))
	}
	assert.Equal(t, filler(0, 30), text.String())
	last := lines[len(lines)-1]
	assert.Equal(t, true, last["done"])
	assert.Equal(t, "stop", last["done_reason"])
	assert.EqualValues(t, 42, last["prompt_eval_count"])
	assert.EqualValues(t, 30, last["eval_count"])
}

// The SDKs' own cancellation reaches the server too.
func TestSDKCancellationReachesServer(t *testing.T) {
	r := serve(t, OpenAI, seat.Plan{TTFB: 10 * ms, Wait: 30 * ms, Elapsed: 5 * time.Second, CompletionTokens: 100})
	client := openaiClient(r.baseURL(OpenAI))
	ctx, cancel := context.WithTimeout(context.Background(), 200*ms)
	defer cancel()
	stream := client.Chat.Completions.NewStreaming(ctx, openaiParams(true))
	var chunks int
	for stream.Next() {
		chunks++
	}
	gaveUp := time.Now()
	require.ErrorIs(t, stream.Err(), context.DeadlineExceeded)
	assert.Greater(t, chunks, 1, "content was streaming when the deadline fired")
	rec, _ := r.awaitState(t, 0, StateCancelled, gaveUp, realtime.Hang()) // the event; how soon is load
	assert.GreaterOrEqual(t, rec.AfterS, 0.19)
}
