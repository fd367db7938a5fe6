package seat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Tokenizers a seat may count with (Config.Tokenizer).
const (
	TokenizerLocal  = "local"  // the local tiktoken encoding (the default)
	TokenizerServer = "server" // the server's own /tokenize endpoint
)

// CheckTokenizer says whether v ("" for the default) is a tokenizer a
// seat of kind can count with: server only for the HTTP kinds.
func CheckTokenizer(kind, v string) error {
	switch v {
	case "", TokenizerLocal:
		return nil
	case TokenizerServer:
		if kind == "openai" || kind == "anthropic" || kind == "ollama" {
			return nil
		}
		return fmt.Errorf("server: only an openai, anthropic or ollama seat has a server to ask")
	}
	return fmt.Errorf("%q is not local or server", v)
}

// serverCountTimeout bounds asking the server for an attempt's counts,
// after its timed window; past it the local tokenizer counts.
const serverCountTimeout = 2 * time.Second

// maxTokenizeAnswer bounds a /tokenize answer read (a token id list).
const maxTokenizeAnswer = 8 << 20

// serverTokenizer asks the seat's server to count, with the model's own
// vocabulary and chat template, what an answer without usage does not
// say: llama.cpp's llama-server (POST /tokenize {"content": …} →
// {"tokens": […]}, its chat template through POST /apply-template
// {"messages": […]} → {"prompt": …}) and vLLM (POST /tokenize
// {"model": …, "prompt": …} or {"model": …, "messages": …} → {"count":
// n, "tokens": […]}), both at the server's root, beside /v1.
type serverTokenizer struct {
	rt     http.RoundTripper // the seat's own transport, never a proxy's wrapper
	root   *url.URL          // never print it: it may hold a query string
	header http.Header
	model  string
	// dialect is how the server takes a chat: 0 not known yet, 1 apply
	// its template first (llama.cpp), 2 messages to /tokenize (vLLM).
	dialect atomic.Int32
}

const (
	dialectTemplate int32 = 1
	dialectMessages int32 = 2
)

// newServerTokenizer is the tokenizer at the root of the seat's base
// URL (the base path without its trailing /v1).
func newServerTokenizer(base *url.URL, rt http.RoundTripper, header http.Header, model string) *serverTokenizer {
	root := *base
	root.Path = strings.TrimSuffix(strings.TrimRight(root.Path, "/"), "/v1")
	root.RawPath = ""
	return &serverTokenizer{rt: rt, root: &root, header: header, model: model}
}

// errNoTokenizer: the server does not count (no such endpoint, or an
// answer that is not a count).
var errNoTokenizer = errors.New("the server has no tokenizer endpoint")

// post sends body to path at the root and decodes a 200's JSON into v.
func (t *serverTokenizer) post(ctx context.Context, path string, body any, v any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	u := *t.root
	u.Path += path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(b))
	if err != nil {
		return err
	}
	for k, vs := range t.header {
		req.Header[k] = vs
	}
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenizeAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errNoTokenizer
	}
	if json.Unmarshal(buf, v) != nil {
		return errNoTokenizer
	}
	return nil
}

// tokenized is a /tokenize answer: vLLM's count, else the length of
// the token list (llama.cpp's).
type tokenized struct {
	Count  *int64            `json:"count"`
	Tokens []json.RawMessage `json:"tokens"`
}

func (r tokenized) n() (int64, error) {
	if r.Count != nil && *r.Count >= 0 {
		return *r.Count, nil
	}
	if r.Tokens == nil {
		return 0, errNoTokenizer
	}
	return int64(len(r.Tokens)), nil
}

// countText counts generated text: no special tokens added. One request
// that both servers read (each ignores the other's fields).
func (t *serverTokenizer) countText(ctx context.Context, text []byte) (int64, error) {
	var r tokenized
	s := string(text)
	err := t.post(ctx, "/tokenize", map[string]any{
		"model": t.model, "content": s, "prompt": s, "add_special": false, "add_special_tokens": false,
	}, &r)
	if err != nil {
		return 0, err
	}
	return r.n()
}

// countChat counts the prompt as the server processes it: its chat
// template applied, with the reply's start, and the special tokens its
// completion path adds.
func (t *serverTokenizer) countChat(ctx context.Context, req Request) (int64, error) {
	msgs := req.chat()
	if req.Body != nil {
		var b struct {
			Messages []Message `json:"messages"`
		}
		if json.Unmarshal(req.Body, &b) != nil || len(b.Messages) == 0 {
			// A body whose chat is not plain messages: its text, untemplated.
			return t.countText(ctx, []byte(req.Text()))
		}
		msgs = b.Messages
	}
	d := t.dialect.Load()
	if d == 0 || d == dialectTemplate {
		var applied struct {
			Prompt *string `json:"prompt"`
		}
		err := t.post(ctx, "/apply-template", map[string]any{"messages": msgs}, &applied)
		switch {
		case err == nil && applied.Prompt != nil:
			t.dialect.Store(dialectTemplate)
			var r tokenized
			if err := t.post(ctx, "/tokenize", map[string]any{
				"content": *applied.Prompt, "add_special": true, "parse_special": true,
			}, &r); err != nil {
				return 0, err
			}
			return r.n()
		case d == dialectTemplate || !errors.Is(err, errNoTokenizer):
			return 0, errNoTokenizer // a template server that failed, or no answer at all
		}
	}
	var r tokenized
	if err := t.post(ctx, "/tokenize", map[string]any{
		"model": t.model, "messages": msgs, "add_generation_prompt": true,
	}, &r); err != nil {
		return 0, err
	}
	if r.Count == nil {
		return 0, errNoTokenizer // not vLLM's answer
	}
	t.dialect.Store(dialectMessages)
	return r.n()
}
