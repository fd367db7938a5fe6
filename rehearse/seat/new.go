package seat

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/retrygate/retrygate/admit"
)

// envName says whether s is an environment variable's name:
// [A-Za-z_][A-Za-z0-9_]*.
func envName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// fromEnv reads the variable env names, for the config key at, whose
// value is a secret (what: key or value). Errors quote neither the value
// nor a name that might be one: only a conventional name (upper-case, at
// most 40 characters) is safe to echo.
func fromEnv(getenv func(string) string, env, at, what string) (string, error) {
	if !envName(env) {
		// Not quoted: it may be a secret pasted where its variable's name belongs.
		return "", admit.KeyErrorf(at, "not an environment variable name (name the variable that holds the %s, never the %s)", what, what)
	}
	v := strings.TrimSpace(getenv(env))
	if v == "" {
		name := "named there"
		if len(env) <= 40 && strings.ToUpper(env) == env {
			name = env
		}
		return "", admit.KeyErrorf(at, "environment variable %s is not set", name)
	}
	return v, nil
}

// An openai seat's APIs (Config.API).
const (
	APIChat      = "chat"
	APIResponses = "responses"
)

// CheckAPI says whether api ("" for the default) is one a seat of kind
// can speak: only an openai seat chooses, chat or responses.
func CheckAPI(kind, api string) error {
	switch {
	case api == "":
		return nil
	case kind != "openai":
		return fmt.Errorf("only an openai seat chooses its API (chat or responses)")
	case api != APIChat && api != APIResponses:
		return fmt.Errorf("%q is not chat or responses", api)
	}
	return nil
}

// Options are what New takes from its surroundings rather than from the
// seat's config.
type Options struct {
	// Getenv reads the environment (os.Getenv in production); the seat's
	// key is read through it once, at construction.
	Getenv func(string) string
	// Now is the wall clock, used only to read a Retry-After HTTP date
	// or Anthropic's rate-limit reset times when the response has no Date
	// header. Durations never use it: they come from the monotonic clock.
	// Nil means time.Now.
	Now func() time.Time
}

// New builds the seat one `seats:` entry describes, for the kinds openai,
// anthropic, ollama and exec. Script seats are built by the script
// package. Errors name the config key at fault (seats.<name>.<key>) and
// never quote a key or a URL's query string.
func New(cfg Config, getenv func(string) string) (Seat, error) {
	return NewWithOptions(cfg, Options{Getenv: getenv})
}

// NewWithOptions is New with a clock for Retry-After dates.
func NewWithOptions(cfg Config, opts Options) (Seat, error) {
	if opts.Getenv == nil {
		opts.Getenv = func(string) string { return "" }
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	at := func(key string) string { return fmt.Sprintf("seats.%s.%s", cfg.Name, key) }
	switch cfg.Kind {
	case "openai", "anthropic", "ollama":
		return newHTTPSeat(cfg, opts, at)
	case "exec":
		if len(cfg.Command) == 0 || cfg.Command[0] == "" {
			return nil, admit.KeyErrorf(at("command"), "required for kind exec (the argv to run, e.g. [sh, -c, \"llm -m x\"])")
		}
		codec, err := newLazyCodec(cfg.Model, cfg.Encoding)
		if err != nil {
			return nil, admit.KeyErrorf(at("encoding"), "%w", err)
		}
		return &execSeat{cfg: cfg, codec: codec}, nil
	case "script":
		return nil, admit.KeyErrorf(at("kind"), "script seats are built by the script package, not seat.New")
	case "":
		return nil, admit.KeyErrorf(at("kind"), "required (openai, anthropic, ollama, exec or script)")
	}
	return nil, admit.KeyErrorf(at("kind"), "unknown kind %q (want openai, anthropic, ollama, exec or script)", cfg.Kind)
}

func newHTTPSeat(cfg Config, opts Options, at func(string) string) (Seat, error) {
	u, err := CheckBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, admit.KeyErrorf(at("base_url"), "%w", err)
	}
	if cfg.Model == "" {
		return nil, admit.KeyErrorf(at("model"), "required for kind %s", cfg.Kind)
	}
	var key string
	if cfg.APIKeyEnv != "" {
		if key, err = fromEnv(opts.Getenv, cfg.APIKeyEnv, at("api_key_env"), "key"); err != nil {
			return nil, err
		}
	}
	codec, err := newLazyCodec(cfg.Model, cfg.Encoding)
	if err != nil {
		return nil, admit.KeyErrorf(at("encoding"), "%w", err)
	}
	headers, err := seatHeaders(cfg.Headers, opts.Getenv, at)
	if err != nil {
		return nil, err
	}
	extra, err := extraBody(cfg.ExtraBody, at)
	if err != nil {
		return nil, err
	}
	if err := CheckAPI(cfg.Kind, cfg.API); err != nil {
		return nil, admit.KeyErrorf(at("api"), "%w", err)
	}
	if err := CheckTokenizer(cfg.Kind, cfg.Tokenizer); err != nil {
		return nil, admit.KeyErrorf(at("tokenizer"), "%w", err)
	}
	var w wire
	switch {
	case cfg.Kind == "openai" && cfg.API == APIResponses:
		if cfg.MaxTokensParam != "" {
			return nil, admit.KeyErrorf(at("max_tokens_param"), "not for api responses, which sends max_output_tokens")
		}
		w = responsesWire{}
	case cfg.Kind == "openai":
		p := openaiMaxParam(cfg.MaxTokensParam, cfg.Model)
		if p != "max_tokens" && p != "max_completion_tokens" {
			return nil, admit.KeyErrorf(at("max_tokens_param"), "%q is not max_tokens or max_completion_tokens", p)
		}
		w = openaiWire{maxParam: p}
	case cfg.Kind == "anthropic":
		w = anthropicWire{}
	default:
		w = ollamaWire{}
	}
	u.Path = strings.TrimRight(u.Path, "/") + w.path()
	u.RawPath = ""
	if strings.LastIndex(u.Host, ":") > strings.LastIndex(u.Host, "]") {
		u.Host = strings.TrimSuffix(u.Host, ":") // an empty port, as http.NewRequest drops it
	}
	// Every request's headers, in the order they always overrode each
	// other: ours, the wire's, then the seat's headers:.
	base := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"retrygate"}}
	w.header(base, key)
	maps.Copy(base, headers)
	s := &httpSeat{cfg: cfg, endpoint: u, key: key, w: w, rt: newTransport(cfg.Cold), codec: codec, now: opts.Now,
		extra: extra, base: base, rate: new(seatRate)}
	if cfg.Tokenizer == TokenizerServer {
		root, _ := CheckBaseURL(cfg.BaseURL) // checked above
		s.tok = newServerTokenizer(root, s.rt, base, cfg.Model)
	}
	return s, nil
}

// SetAuth sets key on h as a seat of kind sends it: X-Api-Key for
// anthropic, Authorization: Bearer for openai and ollama (an Ollama
// behind an auth proxy). An empty key sets nothing. Every request that
// carries a seat's key sets it here: the seat's own, and the proxy's
// for a seat that injects its key.
func SetAuth(h http.Header, kind, key string) {
	if key == "" {
		return
	}
	if kind == "anthropic" {
		h.Set("X-Api-Key", key)
		return
	}
	h.Set("Authorization", "Bearer "+key)
}

// CheckBaseURL accepts an absolute http(s) URL with a host and no
// credentials. Its messages never quote the URL: a query string may hold
// a key.
func CheckBaseURL(raw string) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, fmt.Errorf("required (e.g. http://127.0.0.1:11434)")
	}
	if !strings.Contains(raw, "://") {
		return nil, fmt.Errorf("no scheme (want http:// or https://)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme is not http or https")
	}
	if u.User != nil {
		return nil, fmt.Errorf("credentials in the URL are refused (name the key with api_key_env)")
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("no host")
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("a fragment has no meaning in a base URL")
	}
	return u, nil
}

// reservedHeaders are set by the seat or the transport; a config may not
// replace them.
var reservedHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Host": true, "Transfer-Encoding": true,
	"Connection": true, "Idempotency-Key": true, "Accept": true, "Accept-Encoding": true,
}

// seatHeaders reads each configured header's value from the variable it
// names. Errors name the config key, never a value.
func seatHeaders(cfg map[string]string, getenv func(string) string, at func(string) string) (http.Header, error) {
	if len(cfg) == 0 {
		return nil, nil
	}
	h := http.Header{}
	for name, env := range cfg {
		key := at("headers." + name)
		canon := http.CanonicalHeaderKey(strings.TrimSpace(name))
		if !httpguts.ValidHeaderFieldName(canon) {
			return nil, admit.KeyErrorf(key, "not a header name")
		}
		if reservedHeaders[canon] {
			return nil, admit.KeyErrorf(key, "set by retrygate itself; it cannot be replaced")
		}
		v, err := fromEnv(getenv, env, key, "value")
		if err != nil {
			return nil, err
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, admit.KeyErrorf(key, "the variable's value is not a valid header value")
		}
		h.Set(canon, v)
	}
	return h, nil
}

// fixedFields make an attempt what it is: a streamed chat call of this
// model and prompt. extra_body may not replace them.
var fixedFields = map[string]bool{"model": true, "messages": true, "input": true, "stream": true, "stream_options": true}

// extraBody checks and encodes the extra body fields once. The config's
// decoders (YAML, JSON and TOML, through viper) give objects as
// map[string]any, which encoding/json takes as it is.
func extraBody(cfg map[string]any, at func(string) string) (map[string]json.RawMessage, error) {
	if len(cfg) == 0 {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, len(cfg))
	for k, v := range cfg {
		if fixedFields[k] {
			return nil, admit.KeyErrorf(at("extra_body."+k), "set by retrygate itself (the attempt is a streamed call of the seat's model)")
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, admit.KeyErrorf(at("extra_body."+k), "not a JSON value")
		}
		out[k] = b
	}
	return out, nil
}

// mergeBody sets extra's fields on a request body (a JSON object).
func mergeBody(body []byte, extra map[string]json.RawMessage) []byte {
	if len(extra) == 0 {
		return body
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return b
}
