package seat

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
)

// TestHeadersAndExtraBody (issue 13): configured headers go out with
// their values from the environment, extra_body fields are merged into
// the request, and no header value shows in the observation or an error.
func TestHeadersAndExtraBody(t *testing.T) {
	const orgValue = "org-SECRET-hdr-4411"
	var gotHeader, gotAzure string
	var body map[string]any
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotHeader, gotAzure = r.Header.Get("OpenAI-Organization"), r.Header.Get("Api-Key")
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &body))
		sw := startStream(w, "text/event-stream")
		sw.data(oaText("hi"))
		sw.raw("data: [DONE]\n\n")
	}))
	getenv := func(k string) string {
		switch k {
		case "ORG_ID":
			return orgValue
		case "AZURE_KEY":
			return "azure-SECRET-key"
		case "SPLIT_VALUE":
			return "sk-live\r\nX-Injected: 1"
		}
		return testEnv(k)
	}
	cfg := Config{Name: "t", Kind: "openai", BaseURL: srv.URL + "/v1", Model: "gpt-4o-mini", APIKeyEnv: testKeyEnv,
		Headers:   map[string]string{"openai-organization": "ORG_ID", "api-key": "AZURE_KEY"},
		ExtraBody: map[string]any{"temperature": 0.2, "seed": 7, "max_tokens": 9, "response_format": map[string]any{"type": "text"}}}
	s, err := NewWithOptions(cfg, Options{Getenv: getenv})
	require.NoError(t, err)
	obs := do(t, s, 2*time.Second, Request{MaxTokens: 64})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	assert.Equal(t, orgValue, gotHeader)
	assert.Equal(t, "azure-SECRET-key", gotAzure)
	assert.Equal(t, 0.2, body["temperature"])
	assert.Equal(t, 7.0, body["seed"])
	assert.Equal(t, 9.0, body["max_tokens"], "extra_body replaces a field the seat sets")
	assert.Equal(t, map[string]any{"type": "text"}, body["response_format"])
	assert.Equal(t, true, body["stream"])
	assert.NotContains(t, obs.Detail, "SECRET")

	bad := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Headers = map[string]string{"X-Org": "NOT_SET_ANYWHERE"} }, "seats.t.headers.X-Org: environment variable NOT_SET_ANYWHERE is not set"},
		{func(c *Config) { c.Headers = map[string]string{"X-Org": "sk-live value"} }, "seats.t.headers.X-Org: not an environment variable name"},
		{func(c *Config) { c.Headers = map[string]string{"bad header": "ORG_ID"} }, "not a header name"},
		{func(c *Config) { c.Headers = map[string]string{"content-type": "ORG_ID"} }, "cannot be replaced"},
		{func(c *Config) { c.Headers = map[string]string{"X-Org": "SPLIT_VALUE"} }, "seats.t.headers.X-Org: the variable's value is not a valid header value"},
		{func(c *Config) { c.ExtraBody = map[string]any{"stream": false} }, "seats.t.extra_body.stream: set by retrygate itself"},
	}
	for _, b := range bad {
		c := cfg
		b.edit(&c)
		_, err := NewWithOptions(c, Options{Getenv: getenv})
		require.Error(t, err)
		assert.Contains(t, err.Error(), b.want)
		assert.False(t, strings.Contains(err.Error(), orgValue) || strings.Contains(err.Error(), "sk-live"), "no value in %q", err)
	}
}

// TestAzureDeploymentURL: an Azure OpenAI deployment URL keeps its
// api-version query on every request, and the query (which some set-ups
// use for a key) shows in no observation.
func TestAzureDeploymentURL(t *testing.T) {
	var path, query string
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, query = r.URL.Path, r.URL.RawQuery
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"code":"rate_limit_exceeded"}}`)
	}))
	cfg := Config{Name: "az", Kind: "openai", Model: "gpt-4o-mini", Headers: map[string]string{"api-key": "AZURE_KEY"},
		BaseURL: srv.URL + "/openai/deployments/my-gpt4o?api-version=2024-10-21"}
	s, err := NewWithOptions(cfg, Options{Getenv: func(k string) string { return map[string]string{"AZURE_KEY": "k"}[k] }})
	require.NoError(t, err)
	obs := do(t, s, 2*time.Second, Request{})
	assert.Equal(t, admit.RateLimited, obs.Outcome)
	assert.Equal(t, "/openai/deployments/my-gpt4o/chat/completions", path)
	assert.Equal(t, "api-version=2024-10-21", query)
	assert.NotContains(t, obs.Detail+obs.ErrorCode, "api-version")
	assert.NotContains(t, s.(*httpSeat).String(), "api-version")

	// Refused at once: the same URL with nothing listening names no query.
	// A new seat, so no kept-alive connection to the closed server is
	// there to be tried first.
	srv.Close()
	s, err = NewWithOptions(cfg, Options{Getenv: func(k string) string { return map[string]string{"AZURE_KEY": "k"}[k] }})
	require.NoError(t, err)
	obs = do(t, s, 2*time.Second, Request{})
	assert.Equal(t, admit.ConnError, obs.Outcome)
	assert.NotContains(t, obs.Detail, "api-version")
}
