package seat

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A prompt longer than the window, in each server's words, is the
// context-length code; other client errors, and a 429 that talks of
// tokens, are not.
func TestTooLongInServersWords(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status int
		code   string
		body   string
		want   bool
	}{
		{"anthropic", 400, "invalid_request_error", `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, true},
		{"vllm", 400, "", `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","code":400}`, true},
		{"llama.cpp", 400, "exceed_context_size_error", `{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}`, false}, // already its code
		{"ollama", 400, "", `{"error":"input is too long for the context window"}`, true},
		{"content filter", 400, "content_filter", `{"error":{"code":"content_filter","message":"the prompt is too long and too rude"}}`, false},
		{"rate limit", 429, "", `{"error":{"message":"too many tokens in the prompt per minute"}}`, false},
		{"plain 400", 400, "invalid_request_error", `{"error":{"type":"invalid_request_error","message":"messages: field required"}}`, false},
	} {
		assert.Equal(t, tt.want, tooLong(tt.status, tt.code, []byte(tt.body)), tt.name)
	}
}
