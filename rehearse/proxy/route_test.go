package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// events gathers the proxy's `# event request` lines.
type events struct {
	mu sync.Mutex
	e  []ledgerfile.Event
}

func (e *events) add(es []ledgerfile.Event) error {
	e.mu.Lock()
	e.e = append(e.e, es...)
	e.mu.Unlock()
	return nil
}

func (e *events) all() []ledgerfile.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]ledgerfile.Event(nil), e.e...)
}

// lines is the events as the log holds them, without their ts.
func (e *events) lines(t testing.TB) []string {
	var out []string
	for _, ev := range e.all() {
		s, err := ledgerfile.FormatEvent(&ev)
		require.NoError(t, err)
		s, _, _ = strings.Cut(s, " ts=")
		out = append(out, s)
	}
	return out
}

func (e *events) wait(t testing.TB, n int) []string {
	t.Helper()
	require.Eventually(t, func() bool { return len(e.all()) >= n }, 5*time.Second, time.Millisecond, "want %d events", n)
	return e.lines(t)
}

// normalisingFront is a provider front that serves a chat completion to
// any request at all, whatever its method or path (as one that folds
// case, drops ;params, decodes %2F and resolves dot segments would), and
// counts what it served.
func normalisingFront(t *testing.T) (base string, served *atomic.Int32, paths chan string) {
	t.Helper()
	served, paths = &atomic.Int32{}, make(chan string, 100)
	ln := listen(t)
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		paths <- r.Method + " " + r.URL.EscapedPath()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, chatAnswer)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/v1", served, paths
}

// rawRequest sends one request with the request-target and method as
// written (no client library cleans them) and returns its answer.
func rawRequest(t *testing.T, origin, method, target string, kv ...string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(origin, "http://"))
	require.NoError(t, err)
	defer c.Close()
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n")
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(kv[i] + ": " + kv[i+1] + "\r\n")
	}
	b.WriteString("Content-Length: " + strconv.Itoa(len(chatBody)) + "\r\nConnection: close\r\n\r\n" + chatBody)
	_, err = io.WriteString(c, b.String())
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// The red team's shapes of a generation request that once went through
// ungated: behind a front that serves a completion to any of them, a job
// with max_attempts 2 gets two completions, each with its row, and every
// other request is refused before it reaches the front.
func TestEveryPathToTheProviderIsGated(t *testing.T) {
	base, served, paths := normalisingFront(t)
	ev := &events{}
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) { o.Events = ev.add })
	shapes := []struct{ method, target string }{
		{"PUT", "/v1/chat/completions"},
		{"post", "/v1/chat/completions"},
		{"POST", "/V1/CHAT/COMPLETIONS"},
		{"POST", "/v1/chat/completions;x=1"},
		{"POST", "/v1/chat/completions/."},
		{"POST", "/v1/x/../chat/completions"},
		{"POST", "/v1/chat/completions."},
		{"POST", "/v1/chat%2Fcompletions"},
		{"POST", "/v1/chat%2fcompletions"},
		{"POST", "/v1/chat/completions%00"},
		{"POST", "/v1/chat/completions%0a"},
		{"POST", "/v1/chat\\completions"},
		{"POST", "/v1/chat%5Ccompletions"},
		{"POST", "/v1/completions"},
		{"POST", "/v1/models/../chat/completions"},
		{"POST", "/v1/chat%252Fcompletions"},
		{"POST", "/v1/chat/completions%20"},
		{"POST", "/v1/%EF%BD%83hat/completions"},
		{"POST", "//v1/chat/completions"},  // cleaned: the route, gated
		{"POST", "/v1//chat/completions/"}, // cleaned: the route, gated
		{"POST", "/v1/chat/completions"},   // the cap refuses it
	}
	statuses := map[string]int{}
	for _, s := range shapes {
		resp, _ := rawRequest(t, px.url, s.method, s.target, headerJob, "front")
		statuses[s.method+" "+s.target] = resp.StatusCode
	}
	px.stop()
	assert.Equal(t, int32(2), served.Load(), "completions served to a job with max_attempts 2")
	close(paths)
	var got []string
	for p := range paths {
		got = append(got, p)
	}
	assert.Equal(t, []string{"POST /v1/chat/completions", "POST /v1/chat/completions"}, got, "what went upstream is the route, cleaned")
	rs := px.rows.all()
	require.Len(t, rs, 3)
	assert.Equal(t, []int{1, 2, 3}, []int{rs[0].Attempt, rs[1].Attempt, rs[2].Attempt})
	assert.Equal(t, "refuse: attempt cap", rs[2].Decision)
	for _, s := range shapes[:18] {
		k := s.method + " " + s.target
		want := http.StatusNotFound
		if s.method != "POST" && s.target == "/v1/chat/completions" {
			want = http.StatusMethodNotAllowed
		}
		assert.Equal(t, want, statuses[k], k)
	}
	assert.Len(t, ev.all(), 18, "each refusal is an event line")
}

// A refusal off the allow-list is in the provider's shape: 405 with
// Allow on a known path, 404 elsewhere; neither reads the body nor
// writes a row, and each is an event line.
func TestRouteRefusalShapes(t *testing.T) {
	base, served, _ := normalisingFront(t)
	ev := &events{}
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "anthropic", base)}, func(o *Options) { o.Events = ev.add })

	resp, body := rawRequest(t, px.url, "GET", "/v1/messages")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "POST", resp.Header.Get("Allow"))
	var shape struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &shape), body)
	assert.Equal(t, "error", shape.Type)
	assert.Equal(t, "invalid_request_error", shape.Error.Type)

	resp, body = rawRequest(t, px.url, "POST", "/v1/models")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))

	resp, body = rawRequest(t, px.url, "POST", "/v1/complete")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.NoError(t, json.Unmarshal([]byte(body), &shape), body)
	assert.Equal(t, "not_found_error", shape.Error.Type)
	assert.Equal(t, "not_found", resp.Header.Get("X-Retrygate-Refused"))

	px.stop()
	assert.Zero(t, served.Load())
	assert.Empty(t, px.rows.all())
	assert.Equal(t, []string{
		"# event request method=GET path=/v1/messages served=refused status=405 code=method_not_allowed elapsed_s=0.000 client=127.0.0.1",
		"# event request method=POST path=/v1/models served=refused status=405 code=method_not_allowed elapsed_s=0.000 client=127.0.0.1",
		"# event request method=POST path=/v1/complete served=refused status=404 code=not_found elapsed_s=0.000 client=127.0.0.1",
	}, ev.lines(t))
}

// Every wire format's allow-list, as docs/proxy.md states it.
func TestRoutesPerKind(t *testing.T) {
	cases := []struct {
		kind, base, method, path string
		how                      served
	}{
		{"openai", "http://h/v1", "POST", "/v1/chat/completions", servedGated},
		{"openai", "http://h/v1", "POST", "/v1/responses", servedGated},
		{"openai", "http://h/v1", "GET", "/v1/responses/resp_abc123", servedPass},
		{"openai", "http://h/v1", "GET", "/v1/models", servedPass},
		{"openai", "http://h/v1", "HEAD", "/v1/models", servedPass},
		{"openai", "http://h/v1", "GET", "/v1/models/ft:gpt-4o:org:x", servedPass},
		{"openai", "http://h/v1", "GET", "/v1/responses/a/b", servedRefused},
		{"openai", "http://h/v1", "DELETE", "/v1/responses/resp_1", servedRefused},
		{"openai", "http://h/openai/v1/", "POST", "/openai/v1/chat/completions", servedGated},
		{"openai", "http://h/openai/v1/", "POST", "/v1/chat/completions", servedRefused},
		{"anthropic", "http://h/v1", "POST", "/v1/messages", servedGated},
		{"anthropic", "http://h/v1", "POST", "/v1/messages/count_tokens", servedPass},
		{"anthropic", "http://h/v1", "GET", "/v1/models", servedPass},
		{"anthropic", "http://h/v1", "POST", "/v1/messages/batches", servedRefused},
		{"ollama", "http://h", "POST", "/api/chat", servedGated},
		{"ollama", "http://h", "POST", "/api/generate", servedGated},
		{"ollama", "http://h", "GET", "/api/tags", servedPass},
		{"ollama", "http://h", "GET", "/api/version", servedPass},
		{"ollama", "http://h", "POST", "/api/show", servedPass},
		{"ollama", "http://h", "POST", "/v1/chat/completions", servedRefused},
		{"ollama", "http://h", "POST", "/api/pull", servedRefused},
	}
	for _, c := range cases {
		p := &Proxy{routes: routes(c.kind, basePath(c.base))}
		r, err := http.NewRequest(c.method, "http://proxy"+c.path, nil)
		require.NoError(t, err)
		assert.Equal(t, c.how, p.route(r).how, "%s %s %s", c.kind, c.method, c.path)
	}
}

// Pass-through requests on the allow-list are forwarded ungated and
// logged as event lines, never as rows: report and check count no
// attempt for them. --pass-unknown forwards a path off the list the same
// way, but never one that only a normalisation makes a generation.
func TestPassThroughLoggedAndPassUnknown(t *testing.T) {
	base, served, paths := normalisingFront(t)
	ev := &events{}
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", base)}, func(o *Options) {
		o.Events = ev.add
		o.PassUnknown = true
	})
	resp, _ := rawRequest(t, px.url, "GET", "/v1/models?after=x")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = rawRequest(t, px.url, "GET", "/v1//files/")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	for _, target := range []string{"/V1/Chat/Completions", "/v1/chat%2Fcompletions", "/v1/x/../chat/completions",
		"/v1/completions", "/proxy/v1/chat/completions", "/v1/chat/completions/x", "/v1/chat%252Fcompletions",
		"/v1/chat/completions%20", "/v1/%EF%BD%83hat/completions"} {
		resp, _ = rawRequest(t, px.url, "POST", target)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, target)
	}
	resp, _ = rawRequest(t, px.url, "PUT", "/v1/chat/completions")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	px.stop()
	assert.Equal(t, int32(2), served.Load())
	assert.Equal(t, "GET /v1/models", <-paths)
	assert.Equal(t, "GET /v1/files", <-paths)
	assert.Empty(t, px.rows.all())
	// A request's line is written once it is answered, so the next
	// request's may come first: the lines are a set.
	lines := ev.wait(t, 12)
	for i := range lines {
		lines[i] = strings.Join(strings.Fields(lines[i])[:7], " ") // no elapsed_s: it varies
	}
	assert.Len(t, lines, 12, "a line for each request")
	assert.Subset(t, lines, []string{
		"# event request seat=s method=GET path=/v1/models served=pass",
		"# event request seat=s method=GET path=/v1/files served=unknown",
		"# event request method=POST path=/V1/Chat/Completions served=refused status=404",
		"# event request method=POST path=/v1/chat%2Fcompletions served=refused status=404",
		"# event request method=POST path=/v1/x/../chat/completions served=refused status=404",
		"# event request method=PUT path=/v1/chat/completions served=refused status=405",
	}, lines)
}

// Whatever the request-target, what goes upstream is a route's own path
// or, under PassUnknown, a clean path no case-folding makes a gated
// route; a gated request is exactly a gated route's method and path.
func FuzzRoute(f *testing.F) {
	for _, s := range []string{
		"/v1/chat/completions", "//v1/chat/completions", "/v1/chat%2Fcompletions", "/v1/x/../chat/completions",
		"/v1/chat/completions;x=1", "/v1/chat/completions.", "/v1/chat/completions%00", "/V1/CHAT/COMPLETIONS",
		"/v1/models/gpt-4o", "/v1/responses/resp_1", "/v1/%63hat/completions", "/v1/chat/completions/",
	} {
		f.Add("POST", s)
		f.Add("GET", s)
	}
	p := &Proxy{opts: Options{PassUnknown: true}, routes: routes("openai", "/v1")}
	f.Fuzz(func(t *testing.T, method, target string) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: h\r\n\r\n")))
		if err != nil {
			return // net/http refuses it before any handler
		}
		rt := p.route(r)
		if rt.how == servedRefused {
			return
		}
		got := r.URL.EscapedPath()
		if r.URL.RawPath != "" || path.Clean(r.URL.Path) != r.URL.Path {
			t.Fatalf("%s %q: forwarded as %q, not a clean path", method, target, got)
		}
		for i := 0; i < len(r.URL.Path); i++ {
			if c := r.URL.Path[i]; c <= 0x20 || c >= 0x7f || c == '%' || c == ';' || c == '\\' {
				t.Fatalf("%s %q: forwarded path %q holds %q", method, target, r.URL.Path, c)
			}
		}
		switch rt.how {
		case servedGated:
			if r.Method != rt.r.method || r.URL.Path != rt.r.path {
				t.Fatalf("%s %q: gated as %s %s", method, target, rt.r.method, rt.r.path)
			}
		case servedUnknown:
			if p.confusable(r.URL.Path) {
				t.Fatalf("%s %q: a gated route forwarded ungated", method, target)
			}
		}
	})
}
