package seatserver

import (
	"fmt"
	"net"
	"strings"
)

// Format is the wire format a seat server speaks.
type Format string

const (
	OpenAI    Format = "openai"    // POST /v1/chat/completions, SSE chat.completion.chunk
	Anthropic Format = "anthropic" // POST /v1/messages, SSE with event: lines
	Ollama    Format = "ollama"    // POST /api/chat, NDJSON
)

// Formats lists every format in a stable order.
var Formats = []Format{OpenAI, Anthropic, Ollama}

// ParseFormat accepts exactly one of the format names.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown format %q (want openai, anthropic or ollama)", s)
}

// Path is the endpoint the format is served on.
func (f Format) Path() string {
	switch f {
	case Anthropic:
		return "/v1/messages"
	case Ollama:
		return "/api/chat"
	default:
		return "/v1/chat/completions"
	}
}

// streamContentType is what a streamed 200 goes out as: SSE, or NDJSON
// for Ollama.
func (f Format) streamContentType() string {
	if f == Ollama {
		return "application/x-ndjson"
	}
	return "text/event-stream; charset=utf-8"
}

// ResponsesPath is where an openai seat server also speaks the Responses
// API (POST; GET {ResponsesPath}/{id} reads a response back).
const ResponsesPath = "/v1/responses"

// BaseURL is the base URL a retrygate seat of this format should be given
// for a server listening on addr: our seats POST {base_url}/chat/completions,
// {base_url}/messages and {base_url}/api/chat. The OpenAI SDK takes the same
// base URL; the Anthropic SDK wants it without the /v1 (it appends
// v1/messages itself).
func (f Format) BaseURL(addr net.Addr) string {
	if f == Ollama {
		return "http://" + addr.String()
	}
	return "http://" + addr.String() + "/v1"
}

// CheckLoopback refuses a listen address that is not on loopback:
// 127.0.0.0/8, ::1 or localhost. An empty host (":8080") means every
// interface and is refused too.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not host:port %q", addr)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	if host == "" {
		return fmt.Errorf("%q listens on every interface, not only loopback", addr)
	}
	return fmt.Errorf("%q is not a loopback address", host)
}
