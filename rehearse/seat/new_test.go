package seat

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewErrors(t *testing.T) {
	ok := Config{Name: "scratch", Kind: "openai", BaseURL: "http://127.0.0.1:6556/v1", Model: "gpt-4o-mini", APIKeyEnv: testKeyEnv}
	tests := []struct {
		name    string
		edit    func(*Config)
		want    string // the whole message
		notWant string // must not appear
	}{
		{"unknown kind", func(c *Config) { c.Kind = "bedrock" },
			`seats.scratch.kind: unknown kind "bedrock" (want openai, anthropic, ollama, exec or script)`, ""},
		{"no kind", func(c *Config) { c.Kind = "" },
			`seats.scratch.kind: required (openai, anthropic, ollama, exec or script)`, ""},
		{"script is built elsewhere", func(c *Config) { c.Kind = "script" },
			`seats.scratch.kind: script seats are built by the script package, not seat.New`, ""},
		{"missing key variable", func(c *Config) { c.APIKeyEnv = "NO_SUCH_KEY_VAR" },
			`seats.scratch.api_key_env: environment variable NO_SUCH_KEY_VAR is not set`, ""},
		{"a key pasted as the variable name", func(c *Config) { c.APIKeyEnv = "sk-proj-AbCdEf0123456789" },
			`seats.scratch.api_key_env: not an environment variable name (name the variable that holds the key, never the key)`, "AbCdEf"},
		{"a key-like name is not echoed", func(c *Config) { c.APIKeyEnv = "abcdef0123456789abcdef0123456789" },
			`seats.scratch.api_key_env: environment variable named there is not set`, "abcdef01"},
		{"no base url", func(c *Config) { c.BaseURL = "" },
			`seats.scratch.base_url: required (e.g. http://127.0.0.1:11434)`, ""},
		{"ftp", func(c *Config) { c.BaseURL = "ftp://127.0.0.1/v1" },
			`seats.scratch.base_url: scheme is not http or https`, ""},
		{"no scheme", func(c *Config) { c.BaseURL = "127.0.0.1:6556/v1" },
			`seats.scratch.base_url: no scheme (want http:// or https://)`, ""},
		{"host:port without scheme", func(c *Config) { c.BaseURL = "localhost:6556/v1" },
			`seats.scratch.base_url: no scheme (want http:// or https://)`, ""},
		{"no host", func(c *Config) { c.BaseURL = "http:///v1" },
			`seats.scratch.base_url: no host`, ""},
		{"userinfo refused, not echoed", func(c *Config) { c.BaseURL = "https://user:hunter2@127.0.0.1/v1" },
			`seats.scratch.base_url: credentials in the URL are refused (name the key with api_key_env)`, "hunter2"},
		{"query never echoed", func(c *Config) { c.BaseURL = "gopher://127.0.0.1/v1?key=hunter2" },
			`seats.scratch.base_url: scheme is not http or https`, "hunter2"},
		{"unparsable, not echoed", func(c *Config) { c.BaseURL = "http://[::1/v1?key=hunter2" },
			`seats.scratch.base_url: not a valid URL`, "hunter2"},
		{"no model", func(c *Config) { c.Model = "" },
			`seats.scratch.model: required for kind openai`, ""},
		{"bad encoding", func(c *Config) { c.Encoding = "o300k" },
			`seats.scratch.encoding: unknown encoding "o300k" (want cl100k_base, o200k_base, p50k_base, p50k_edit or r50k_base)`, ""},
		{"bad max tokens param", func(c *Config) { c.MaxTokensParam = "max_new_tokens" },
			`seats.scratch.max_tokens_param: "max_new_tokens" is not max_tokens or max_completion_tokens`, ""},
		{"exec without command", func(c *Config) { c.Kind, c.BaseURL = "exec", "" },
			`seats.scratch.command: required for kind exec (the argv to run, e.g. [sh, -c, "llm -m x"])`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.edit(&cfg)
			s, err := New(cfg, testEnv)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Equal(t, tt.want, err.Error())
			assert.NotContains(t, err.Error(), testKey)
			if tt.notWant != "" {
				assert.NotContains(t, err.Error(), tt.notWant)
			}
		})
	}
}

func TestNewAccepts(t *testing.T) {
	for _, cfg := range []Config{
		{Name: "a", Kind: "openai", BaseURL: "http://127.0.0.1:6556/v1", Model: "gpt-4o-mini"}, // no key: a local server
		{Name: "b", Kind: "anthropic", BaseURL: "https://127.0.0.1:8443/v1/", Model: "claude", APIKeyEnv: testKeyEnv},
		{Name: "c", Kind: "ollama", BaseURL: "http://[::1]:11434", Model: "llama3.2", Encoding: "cl100k_base"},
		{Name: "d", Kind: "exec", Command: []string{"llm", "-m", "x"}},
	} {
		s, err := New(cfg, testEnv)
		require.NoError(t, err, cfg.Name)
		assert.Equal(t, cfg.Name, s.Name())
	}
}

// TestPlantedKeyNeverLeaks: the key read from the env var a seat names
// reaches the server and nothing else — not the observation, its Detail
// or ErrorCode, nor the seat's own printed form — even when the server
// echoes it back in every place it can.
func TestPlantedKeyNeverLeaks(t *testing.T) {
	echo := func(r *http.Request) string {
		k := r.Header.Get("X-Api-Key")
		if k == "" {
			k = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		return k
	}
	handlers := map[string]http.HandlerFunc{
		"error body": func(w http.ResponseWriter, r *http.Request) {
			k := echo(r)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Echo", k)
			w.Header().Set("Retry-After", k)
			w.WriteHeader(401)
			fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"%s","code":"%s"}}`, k, k, k)
		},
		"error code is a slice of the key": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(400)
			fmt.Fprintf(w, `{"error":{"message":"bad","code":"%s"}}`, echo(r)[3:15])
		},
		"stream error event": func(w http.ResponseWriter, r *http.Request) {
			k := echo(r)
			sw := startStream(w, "text/event-stream")
			sw.data(oaText("answer with " + k))
			sw.event("error", fmt.Sprintf(`{"type":"error","error":{"type":"%s","message":"%s"}}`, k, k))
		},
		"content type": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/"+echo(r))
			io.WriteString(w, "x")
		},
	}
	for name, h := range handlers {
		for _, kind := range []string{"openai", "anthropic", "ollama"} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				var got string
				srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					got = echo(r)
					h(w, r)
				}))
				s := newTestSeat(t, kind, srv.URL+"/?token=query-secret")
				obs := do(t, s, 2*time.Second, Request{})
				assert.Equal(t, testKey, got, "the server received the key")
				noSecret(t, obs)
				noSecret(t, s)
				assert.NotContains(t, fmt.Sprintf("%#v", obs), "query-secret")
				assert.NotContains(t, fmt.Sprintf("%#v", s), "query-secret")
			})
		}
	}
}
