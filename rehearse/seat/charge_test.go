package seat

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// An error event after content is billable, as a reset mid-stream is:
// the server generated what it sent (a mid-stream 500 after 128 tokens
// was billed free). One before any content stays as the table says.
func TestErrorEventAfterContentIsBillable(t *testing.T) {
	for _, tc := range []struct {
		name, kind string
		h          http.HandlerFunc
		want       admit.Outcome
		bill       admit.Billing
	}{
		{"openai after content", "openai", sseHandler(0, data(oaText("Hello there")),
			"event: error\n"+data(`{"error":{"message":"boom","type":"server_error"}}`)), admit.ServerError, admit.Billable},
		{"anthropic after content", "anthropic", sseHandler(0,
			"event: content_block_delta\n"+data(anText("par")),
			"event: error\n"+data(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)), admit.ServerError, admit.Billable},
		{"ollama after content", "ollama", func(w http.ResponseWriter, r *http.Request) {
			sw := startStream(w, "application/x-ndjson")
			sw.line(olText("a"))
			sw.line(`{"error":"an error was encountered while running the model"}`)
		}, admit.ServerError, admit.Billable},
		{"openai rate limit after content", "openai", sseHandler(0, data(oaText("Hello")),
			data(`{"error":{"type":"rate_limit_exceeded"}}`)), admit.RateLimited, admit.Billable},
		{"openai before content", "openai", sseHandler(0,
			"event: error\n"+data(`{"error":{"message":"boom","type":"server_error"}}`)), admit.ServerError, admit.Free},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := do(t, newTestSeat(t, tc.kind, loopback(t, tc.h).URL), 2*time.Second, Request{})
			assert.Equal(t, tc.want, obs.Outcome, obs.Detail)
			assert.Equal(t, tc.bill, obs.Billing)
			if tc.bill == admit.Billable {
				assert.Positive(t, obs.CompletionTokens)
				assert.Contains(t, obs.Detail, "after content")
			}
		})
	}
}

// A cut non-streamed attempt is charged its elapsed generation at the
// seat's observed rate, at most max_tokens, or max_tokens before any
// rate was observed (a proxy's cut of a non-streamed request was
// recorded at its prompt's 5 tokens while the server had generated
// 160-180).
func TestCutNonStreamedCharged(t *testing.T) {
	var mu sync.Mutex
	streamed := true
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := streamed
		mu.Unlock()
		if s {
			// 1,000 tokens a second: 100 tokens over 100 ms after the first.
			sw := startStream(w, "text/event-stream")
			sw.data(oaText("Hello"))
			time.Sleep(100 * time.Millisecond)
			sw.data(`{"choices":[{"index":0,"delta":{"content":" there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":100}}`)
			sw.raw("data: [DONE]\n\n")
			return
		}
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done() // generating, never done within the hard timeout
	}))
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"Say hello."}],"max_tokens":300}`)
	const hard = 200 * time.Millisecond

	t.Run("no rate yet: max_tokens", func(t *testing.T) {
		mu.Lock()
		streamed = false
		mu.Unlock()
		obs := do(t, newTestSeat(t, "openai", srv.URL), hard, Request{Prompt: "Say hello.", Body: body})
		require.Equal(t, admit.Timeout, obs.Outcome, obs.Detail)
		assert.Equal(t, int64(300), obs.CompletionTokens)
		assert.Equal(t, FromEstimate, obs.TokensFrom)
		assert.Greater(t, obs.PromptTokens, int64(3), "the prompt, and the template's cost")
	})
	t.Run("at the seat's rate", func(t *testing.T) {
		s := newTestSeat(t, "openai", srv.URL)
		mu.Lock()
		streamed = true
		mu.Unlock()
		ok := do(t, s, 2*time.Second, Request{})
		require.Equal(t, admit.OK, ok.Outcome, ok.Detail)
		rate := float64(ok.CompletionTokens) / (ok.Elapsed - ok.Wait).Seconds()

		mu.Lock()
		streamed = false
		mu.Unlock()
		obs := do(t, s, hard, Request{Prompt: "Say hello.", Body: body})
		require.Equal(t, admit.Timeout, obs.Outcome, obs.Detail)
		assert.Equal(t, FromEstimate, obs.TokensFrom)
		want := min(int64(rate*obs.Elapsed.Seconds()+1), 300)
		assert.InDelta(t, want, obs.CompletionTokens, 1, "rate %.0f/s over %s", rate, obs.Elapsed)
		assert.Less(t, obs.CompletionTokens, int64(300))
	})
}

// A streamed attempt cut mid-answer is charged at least what it sent,
// and what it generated since at its own rate, up to the cut.
func TestCutStreamEstimate(t *testing.T) {
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := startStream(w, "text/event-stream")
		for range 10 {
			sw.data(oaText(" word"))
			time.Sleep(10 * time.Millisecond)
		}
		<-r.Context().Done()
	}))
	s := newTestSeat(t, "openai", srv.URL)
	obs := do(t, s, 400*time.Millisecond, Request{})
	require.Equal(t, admit.Timeout, obs.Outcome, obs.Detail)
	assert.Equal(t, FromEstimate, obs.TokensFrom)
	assert.Greater(t, obs.CompletionTokens, int64(10), "ten words seen, more generated by the cut")
}

// tokenizerServer is a llama.cpp llama-server (template: true) or a vLLM
// (false) as far as counting goes: a stream of content without usage,
// cut or not, and /tokenize (with /apply-template for llama.cpp). Every
// token is one word.
func tokenizerServer(t *testing.T, template, cut bool, asked *[]string, mu *sync.Mutex) string {
	words := func(s string) int { return len(strings.Fields(s)) }
	answer := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		sw := startStream(w, "text/event-stream")
		sw.data(oaText("one two three four five six"))
		if cut {
			<-r.Context().Done()
			return
		}
		sw.data(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		sw.raw("data: [DONE]\n\n")
	})
	var templated string
	if template {
		mux.HandleFunc("POST /apply-template", func(w http.ResponseWriter, r *http.Request) {
			var b struct{ Messages []Message }
			require.NoError(t, json.NewDecoder(r.Body).Decode(&b))
			p := "<|system|> you are a model <|end|>"
			for _, m := range b.Messages {
				p += " <|" + m.Role + "|> " + m.Content + " <|end|>"
			}
			templated = p + " <|assistant|>"
			answer(w, map[string]string{"prompt": templated})
		})
	}
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "Bearer "+testKey, r.Header.Get("Authorization"), "the seat's key")
		var b map[string]json.RawMessage
		require.NoError(t, json.NewDecoder(r.Body).Decode(&b))
		var what string
		n := 0
		switch {
		case template && b["content"] != nil:
			var c string
			json.Unmarshal(b["content"], &c)
			what, n = "content", words(c)
			if c == templated {
				what = "templated"
			}
		case !template && b["messages"] != nil:
			var ms []Message
			json.Unmarshal(b["messages"], &ms)
			what, n = "messages", 7 // the template's own
			for _, m := range ms {
				n += words(m.Content) + 2
			}
		case !template && b["prompt"] != nil:
			var p string
			json.Unmarshal(b["prompt"], &p)
			what, n = "prompt", words(p)
		}
		mu.Lock()
		*asked = append(*asked, what)
		mu.Unlock()
		toks := make([]int, n)
		if template {
			answer(w, map[string]any{"tokens": toks})
		} else {
			answer(w, map[string]any{"count": n, "max_model_len": 4096, "tokens": toks})
		}
	})
	return loopback(t, mux).URL
}

// tokenizer: server counts what the answer's usage does not say with
// the server's own vocabulary and chat template: llama.cpp's
// /apply-template then /tokenize, vLLM's /tokenize with the messages
// (the local cl100k count, without the template, gave 6-7 prompt tokens
// where the server processed 37-49).
func TestServerTokenizer(t *testing.T) {
	req := Request{Messages: []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "say hello in five words"}}}
	for _, template := range []bool{true, false} {
		name := "vllm"
		if template {
			name = "llama.cpp"
		}
		// llama.cpp: "<|system|> you are a model <|end|>" (6), each
		// message "<|role|> … <|end|>" (2+words), "<|assistant|>" (1).
		wantPrompt := int64(6 + (2 + 2) + (2 + 5) + 1)
		if !template {
			wantPrompt = 7 + (2 + 2) + (2 + 5)
		}
		for _, cut := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "/whole", true: "/cut"}[cut], func(t *testing.T) {
				var mu sync.Mutex
				var asked []string
				base := tokenizerServer(t, template, cut, &asked, &mu)
				s := newTestSeat(t, "openai", base, func(c *Config) { c.Tokenizer = TokenizerServer })
				hard := 2 * time.Second
				if cut {
					hard = 300 * time.Millisecond
				}
				obs := do(t, s, hard, req)
				if cut {
					require.Equal(t, admit.Timeout, obs.Outcome, obs.Detail)
					assert.Equal(t, FromEstimate, obs.TokensFrom)
					assert.Equal(t, wantPrompt, obs.PromptTokens)
					assert.GreaterOrEqual(t, obs.CompletionTokens, int64(6), "never less than what was seen")
				} else {
					require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
					assert.Equal(t, FromTokenizer, obs.TokensFrom)
					assert.Equal(t, wantPrompt, obs.PromptTokens)
					assert.Equal(t, int64(6), obs.CompletionTokens)
				}
				mu.Lock()
				defer mu.Unlock()
				if template {
					assert.Equal(t, []string{"templated", "content"}, asked)
				} else {
					assert.Equal(t, []string{"messages", "prompt"}, asked)
				}
			})
		}
	}
	t.Run("no tokenizer endpoint: the local count", func(t *testing.T) {
		srv := loopback(t, sseHandler(0, data(oaText("one two three")), "data: [DONE]\n\n"))
		s := newTestSeat(t, "openai", srv.URL, func(c *Config) { c.Tokenizer = TokenizerServer })
		obs := do(t, s, 2*time.Second, req)
		require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
		assert.Equal(t, FromTokenizer, obs.TokensFrom)
		assert.Positive(t, obs.PromptTokens)
		assert.Positive(t, obs.CompletionTokens)
	})
}

// slowBody is an answer body whose reads return late after the body is
// closed: a reading goroutine that the scheduler runs again long after
// the cut, as 64 attempts cut at once, each then counting tokens on two
// CPUs, made it.
type slowBody struct {
	io.ReadCloser
	late time.Duration
}

func (b slowBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		time.Sleep(b.late)
	}
	return n, err
}

type slowTransport struct {
	rt   http.RoundTripper
	late time.Duration
}

func (s slowTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(r)
	if err == nil {
		resp.Body = slowBody{resp.Body, s.late}
	}
	return resp, err
}

// The hard timeout cuts where it fires: the row's elapsed is the cut's
// instant, and the server sees the cut then, whenever the reading
// goroutine gets to run again (elapsed 1.308 s for hard: 1.2 s).
// BenchmarkCutUnderLoad measures how close under load.
func TestCutElapsedIsTheCutsInstant(t *testing.T) {
	const hard, late = 300 * time.Millisecond, 600 * time.Millisecond
	watch := newCancelWatch()
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct, frame := firstFrame("openai")
		sw := startStream(w, ct)
		sw.raw(frame)
		watch.hold(r)
	}))
	s, _, ok := WithTransport(newTestSeat(t, "openai", srv.URL), func(own http.RoundTripper) http.RoundTripper {
		return slowTransport{own, late}
	})
	require.True(t, ok)
	start := time.Now()
	obs := DoWithin(context.Background(), s, Request{Prompt: "x"}, hard)
	returned := time.Since(start)
	seen := watch.wait(t).Sub(start)
	require.Equal(t, admit.Timeout, obs.Outcome, obs.Detail)
	require.GreaterOrEqual(t, returned, hard+late, "the reader ran late")
	assert.Less(t, obs.Elapsed, hard+late/2, "elapsed is the cut's instant, not the late reader's")
	assert.Less(t, seen, hard+late/2, "the server saw the cut when it happened")
}
