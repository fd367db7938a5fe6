package seat

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// benchStream is a 40-chunk OpenAI stream with usage, written at once.
var benchStream = func() string {
	var b strings.Builder
	b.WriteString("data: " + oaDelta(`{"role":"assistant","content":""}`) + "\n\n")
	for i := 0; i < 40; i++ {
		b.WriteString("data: " + oaText(" word") + "\n\n")
	}
	b.WriteString("data: " + oaUsage(12, 40) + "\n\ndata: [DONE]\n\n")
	return b.String()
}()

// BenchmarkTimeAttempt is one whole timed attempt against a 127.0.0.1
// server that answers at once: the client's own cost per attempt (CPU
// and allocations on the timed path).
//
//	go test -run '^$' -bench TimeAttempt -benchmem ./rehearse/seat/
func BenchmarkTimeAttempt(b *testing.B) {
	for _, kind := range []string{"openai", "anthropic", "ollama"} {
		b.Run(kind, func(b *testing.B) {
			body := benchStream
			ct := "text/event-stream"
			switch kind {
			case "anthropic":
				var sb strings.Builder
				sb.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n")
				for i := 0; i < 40; i++ {
					sb.WriteString("event: content_block_delta\ndata: " + anText(" word") + "\n\n")
				}
				sb.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":40}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
				body = sb.String()
			case "ollama":
				var sb strings.Builder
				for i := 0; i < 40; i++ {
					sb.WriteString(olText(" word") + "\n")
				}
				sb.WriteString(`{"model":"m","message":{"role":"assistant","content":""},"done":true,"prompt_eval_count":12,"eval_count":40}` + "\n")
				body, ct = sb.String(), "application/x-ndjson"
			}
			srv := loopback(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", ct)
				w.Write([]byte(body))
			}))
			base := srv.URL
			if kind != "ollama" {
				base += "/v1"
			}
			s, err := NewWithOptions(Config{Name: "b", Kind: kind, BaseURL: base, Model: "gpt-4o-mini"}, Options{})
			if err != nil {
				b.Fatal(err)
			}
			req := Request{Prompt: "Say hello in five words.", MaxTokens: 64}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				obs := s.Do(ctx, req)
				cancel()
				if obs.Outcome != admit.OK || obs.TokensFrom != FromUsage {
					b.Fatalf("attempt %d: %s %s %s", i, obs.Outcome, obs.TokensFrom, obs.Detail)
				}
			}
		})
	}
}
