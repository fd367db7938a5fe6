package proxy

import (
	"context"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/retrygate/retrygate/rehearse/seat"
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
// backslash, a byte past printable ASCII once decoded (a control byte,
// NUL, a space, UTF-8), a second encoding (a decoded %), a dot segment,
// a matrix parameter (;), a segment ending in a dot; and under
// PassUnknown, any path holding a generation endpoint in any case.

// route is one entry of a wire format's allow-list.
type route struct {
	method string
	path   string // "{id}" as the last segment matches one identifier
	gated  bool
}

// served is how a request was routed: the served word of its event line.
type served string

const (
	servedGated   served = "gated"   // a generation: the gate, a row
	servedPass    served = "pass"    // an allow-listed pass-through: an event line
	servedUnknown served = "unknown" // off the list, forwarded under PassUnknown: an event line
	servedRefused served = "refused" // 404 or 405: an event line
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
	r := func(method, end string, gated bool) route { return route{method, base + end, gated} }
	switch kind {
	case "anthropic":
		// docs.anthropic.com: Messages, Count Message tokens, Models.
		return []route{
			r(http.MethodPost, "/messages", true),
			r(http.MethodPost, "/messages/count_tokens", false),
			r(http.MethodGet, "/models", false),
			r(http.MethodGet, "/models/{id}", false),
		}
	case "ollama":
		// github.com/ollama/ollama docs/api.md.
		return []route{
			r(http.MethodPost, "/api/chat", true),
			r(http.MethodPost, "/api/generate", true),
			r(http.MethodGet, "/api/tags", false),
			r(http.MethodGet, "/api/version", false),
			r(http.MethodPost, "/api/show", false),
		}
	}
	// platform.openai.com/docs/api-reference: Chat, Responses, Models.
	return []route{
		r(http.MethodPost, "/chat/completions", true),
		r(http.MethodPost, "/responses", true),
		r(http.MethodGet, "/responses/{id}", false),
		r(http.MethodGet, "/models", false),
		r(http.MethodGet, "/models/{id}", false),
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

// confusable reports whether clean could be a generation to some front,
// never forwarded ungated: under PassUnknown, a path holding one of the
// endpoints of the wire format that make a model generate, gated or not
// (a legacy completion, a batch of messages), in any case, is refused,
// for a provider front may fold case or route by a path's ending or part
// (as the proxy itself once did).
func (p *Proxy) confusable(clean string) bool {
	generations := []string{"/completions", "/responses"} // chat/completions and the legacy completions
	switch p.kind {
	case "anthropic":
		generations = []string{"/messages", "/complete"}
	case "ollama":
		generations = []string{"/api/chat", "/api/generate"}
	}
	lower := strings.ToLower(clean)
	for _, g := range generations {
		if strings.Contains(lower, g) {
			return true
		}
	}
	return false
}

// cleanPath is u's decoded path, cleaned as path.Clean does (empty
// segments and a trailing slash dropped), or false for a path only
// another normalisation could route: see the comment at the top. A
// decoded path is printable ASCII without %, ; or \: every route is.
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
		// Past printable ASCII (a space, a control byte, UTF-8 that a
		// front might fold), a second encoding (%), or a separator
		// another server splits on.
		if c := p[i]; c <= 0x20 || c >= 0x7f || c == '%' || c == ';' || c == '\\' {
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

// passThrough forwards a request the gate does not time (GET /v1/models)
// to the first seat's origin, ungated; its event line says so. An
// answer of unknown length goes as it comes; one of known length when it
// is whole (an upstream cut before its end is then the proxy's 502).
func (p *Proxy) passThrough(w http.ResponseWriter, r *http.Request, in *admitted) {
	u := &p.seats[0]
	start, status := time.Now(), http.StatusBadGateway
	defer func() { p.logRequest(r, in.route.how, status, "", u.cfg.Name, start) }()
	ctx, cancel := context.WithTimeout(r.Context(), p.opts.Policy.Timeouts.Hard)
	defer cancel()
	f := newForward(w, r)
	x := &exchange{f: f, u: u, body: in.body, pass: true}
	hreq := (&http.Request{Method: r.Method, Header: http.Header{}}).WithContext(ctx)
	if u.inject {
		// The seat's own key, as its wire format sends it.
		seat.SetAuth(hreq.Header, u.cfg.Kind, strings.TrimSpace(p.opts.Getenv(u.cfg.APIKeyEnv)))
	}
	resp, err := x.RoundTrip(hreq)
	if err != nil {
		if r.Context().Err() != nil {
			panic(http.ErrAbortHandler) // a client that hung up gets no made-up answer
		}
		refusal{status: http.StatusBadGateway, code: "upstream", message: "retrygate: upstream unreachable"}.write(w, p.kind)
		return
	}
	defer x.end()
	status = resp.StatusCode
	err = x.rest(ctx, start.Add(p.opts.Policy.Timeouts.Hard))
	if err == nil && !x.committed {
		x.commit(false)
		err = f.writeErr
	}
	if err != nil {
		if !x.committed && r.Context().Err() == nil {
			refusal{status: http.StatusBadGateway, code: "upstream", message: "retrygate: upstream answer cut short"}.write(w, p.kind)
			return
		}
		f.settle(true)
		panic(http.ErrAbortHandler) // a cut answer must not look whole
	}
	f.settle(false)
}
