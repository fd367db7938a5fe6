package proxy

import (
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// What the proxy serves is decided here, once, before a body is read: the
// request's method (case-sensitive, RFC 9110 §9.1) and its path as
// net/http decodes it, cleaned (path.Clean), matched exactly against the
// wire format's allow-list. A gated route is a generation: one attempt of
// a job, timed and logged. A pass-through route (a model list) is
// forwarded ungated, as one `# event request` line of the log. Anything
// else is refused: 405 with Allow on a known path, 404 on any other, or,
// with Options.PassUnknown, forwarded ungated and logged.
//
// The request goes upstream with the cleaned path (the route's own
// bytes), never the client's spelling of it: a provider front that
// normalises paths differently cannot make an ungated request into a
// generation. A path that only a normalisation would make a route is
// refused outright, even with PassUnknown: an encoded slash or
// backslash, a control byte (NUL included), a dot segment, a matrix
// parameter (;), a segment ending in a dot, and any case-folding of a
// gated route.

// route is one entry of a wire format's allow-list.
type route struct {
	method string
	path   string // "{id}" as the last segment matches one identifier
	gated  bool
}

// served is how a request was routed.
type served int

const (
	servedGated   served = iota // a generation: the gate, a row
	servedPass                  // an allow-listed pass-through: an event line
	servedUnknown               // off the list, forwarded under PassUnknown: an event line
	servedRefused               // 404 or 405: an event line
)

// routes is the allow-list of kind in front of a seat whose base_url
// path is base ("/v1" for openai and anthropic seats, "" for ollama).
//
// The Responses API's GET {base}/responses/{id} retrieves a response a
// POST made (or resumes its stream): it generates nothing new and bills
// nothing the POST did not, so it passes through, logged; only the POST
// is an attempt of a job.
func routes(kind, base string) []route {
	base = strings.TrimRight(base, "/")
	switch kind {
	case "anthropic":
		// docs.anthropic.com: Messages, Count Message tokens, Models.
		return []route{
			{http.MethodPost, base + "/messages", true},
			{http.MethodPost, base + "/messages/count_tokens", false},
			{http.MethodGet, base + "/models", false},
			{http.MethodGet, base + "/models/{id}", false},
		}
	case "ollama":
		// github.com/ollama/ollama docs/api.md.
		return []route{
			{http.MethodPost, base + "/api/chat", true},
			{http.MethodPost, base + "/api/generate", true},
			{http.MethodGet, base + "/api/tags", false},
			{http.MethodGet, base + "/api/version", false},
			{http.MethodPost, base + "/api/show", false},
		}
	}
	// platform.openai.com/docs/api-reference: Chat, Responses, Models.
	return []route{
		{http.MethodPost, base + "/chat/completions", true},
		{http.MethodPost, base + "/responses", true},
		{http.MethodGet, base + "/responses/{id}", false},
		{http.MethodGet, base + "/models", false},
		{http.MethodGet, base + "/models/{id}", false},
	}
}

// basePath is the path of a seat's base_url ("" when it has none).
func basePath(baseURL string) string {
	u, err := url.Parse(baseURL)
	if err != nil {
		return ""
	}
	return strings.TrimRight(u.Path, "/")
}

// routing is the answer of route: how the request is served, the route
// it matched (gated and pass-through), and for a 405 the methods its
// path allows.
type routing struct {
	how   served
	r     *route
	allow []string
}

// route decides how r is served and, for a request that goes upstream,
// sets its URL's path to the cleaned one (what is forwarded).
func (p *Proxy) route(r *http.Request) routing {
	clean, ok := cleanPath(r.URL)
	if !ok {
		return routing{how: servedRefused}
	}
	var allow []string
	for i := range p.routes {
		rt := &p.routes[i]
		if !matchRoute(rt.path, clean) {
			continue
		}
		// HEAD is GET without a body (RFC 9110 §9.3.2).
		if rt.method == r.Method || (rt.method == http.MethodGet && r.Method == http.MethodHead) {
			setPath(r.URL, clean)
			if rt.gated {
				return routing{how: servedGated, r: rt}
			}
			return routing{how: servedPass, r: rt}
		}
		allow = append(allow, rt.method)
		if rt.method == http.MethodGet {
			allow = append(allow, http.MethodHead)
		}
	}
	if allow != nil {
		return routing{how: servedRefused, allow: allow}
	}
	if !p.opts.PassUnknown || p.confusable(clean) {
		return routing{how: servedRefused}
	}
	setPath(r.URL, clean)
	return routing{how: servedUnknown}
}

// confusable reports whether clean is a gated route under a provider
// front that folds case: never forwarded ungated.
func (p *Proxy) confusable(clean string) bool {
	for i := range p.routes {
		if rt := &p.routes[i]; rt.gated && strings.EqualFold(rt.path, clean) {
			return true
		}
	}
	return false
}

// cleanPath is u's decoded path, cleaned as path.Clean does (empty
// segments and a trailing slash dropped), or false for a path only
// another normalisation could route: see the comment at the top.
func cleanPath(u *url.URL) (string, bool) {
	p := u.Path
	if p == "" || p[0] != '/' {
		return "", false // "*", or an opaque or empty request-target
	}
	raw := strings.ToLower(u.EscapedPath())
	if strings.Contains(raw, "%2f") || strings.Contains(raw, "%5c") {
		return "", false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f || c == ';' || c == '\\' {
			return "", false
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if strings.HasSuffix(seg, ".") {
			return "", false // ".", "..", and "completions." alike
		}
	}
	return path.Clean(p), true
}

// matchRoute reports whether clean is pattern, whose last segment may be
// "{id}": one identifier of letters, digits and -_.: (a response or
// model id).
func matchRoute(pattern, clean string) bool {
	prefix, ok := strings.CutSuffix(pattern, "/{id}")
	if !ok {
		return pattern == clean
	}
	id, ok := strings.CutPrefix(clean, prefix+"/")
	if !ok || id == "" {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// setPath makes clean the path forwarded upstream.
func setPath(u *url.URL, clean string) {
	u.Path, u.RawPath = clean, ""
}

// refuseRoute answers a request off the allow-list: 405 with Allow on a
// known path, else 404, in the provider's error shape; its event line
// says so.
func (p *Proxy) refuseRoute(w http.ResponseWriter, r *http.Request, rt routing) {
	ref := refusal{status: http.StatusNotFound, code: "not_found",
		message: "retrygate: no such route behind this proxy (docs/proxy.md: what the proxy serves)"}
	if rt.allow != nil {
		allow := strings.Join(rt.allow, ", ")
		w.Header().Set("Allow", allow)
		ref = refusal{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
			message: "retrygate: " + r.Method + " is not served on this path (Allow: " + allow + ")"}
	}
	ref.write(w, p.kind)
	p.logRequest(r, servedRefused, ref.status, ref.code, "", time.Now())
}
