// Package proxy is the gate in front of a real provider (`retrygate
// proxy`): each client request is one attempt of its job, gated by the
// policy's budget, timed by the seat's own stopwatch, and logged as a row.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"retrygate/admit"
	"retrygate/ledgerfile"
	"retrygate/ledgerfile/store"
	"retrygate/rehearse"
	"retrygate/rehearse/seat"
)

const (
	headerJob        = "X-Retrygate-Job"
	headerIdem       = "Idempotency-Key"
	headerRetryCount = "X-Stainless-Retry-Count"
	// KeyClientRetry is the row key holding the client's own retry
	// counter (the official SDKs send X-Stainless-Retry-Count).
	KeyClientRetry = "client_retry"
	maxJobID       = 128
)

// Defaults for Options' limits.
const (
	DefaultMaxBody       = 8 << 20
	DefaultMaxConcurrent = 256
	DefaultMaxJobs       = 100_000
	DefaultRetention     = 10 * time.Minute
)

// Options build a Proxy.
type Options struct {
	Policy rehearse.Policy
	// Chain is the seats a job may use, in order: the first is where
	// every job starts; the rest are the policy's fallbacks of the same
	// kind. All are openai, anthropic or ollama seats.
	Chain  []seat.Config
	Getenv func(string) string
	// Sink appends rows to the log, in order, from one goroutine. A
	// failed write is reported to OnError and answers still go out.
	Sink    func([]ledgerfile.Row) error
	OnError func(error)
	// Now is the wall clock for rows' ts; durations are monotonic.
	Now func() time.Time
	Run int // requests naming no job become jobs r<Run>-<k>

	// Books, when set, keeps named jobs' books in a store that several
	// proxies share (PostgreSQL): each job's deadline, attempts, tokens and
	// spend are read and charged there under the job's lock, so proxies
	// in front of one database share one budget per job. Nil keeps them
	// in this process (one proxy). Unnamed jobs stay in process either way.
	Books store.Books

	// OnBreaker, when set, is told of every transition of a seat's
	// circuit breaker (see breakerChanged). It is called under the
	// proxy's lock: it must not block or call the proxy.
	OnBreaker func(seat string, at time.Time, from, to admit.BreakerState)

	MaxBody       int64         // request body bound (413); 0: DefaultMaxBody
	MaxConcurrent int           // requests at once (503 past it); 0: DefaultMaxConcurrent
	MaxJobs       int           // jobs remembered at once; 0: DefaultMaxJobs
	Retention     time.Duration // how long a job is remembered past its deadline; 0: DefaultRetention
}

type upstream struct {
	cfg     seat.Config
	seat    seat.Seat
	origin  *url.URL          // scheme and host of base_url: the client's path is kept
	rt      http.RoundTripper // the seat's own http.Transport
	inject  bool
	br      *admit.Breaker
	opened  time.Time // when br last opened
	priced  bool
	fallbck bool
}

// Proxy is the gate in front of one seat and its fallbacks: an
// http.Handler, which Serve serves with net/http's server.
type Proxy struct {
	opts  Options
	kind  string
	seats []upstream
	sem   chan struct{}
	q     *rowQueue
	// queued takes decisions' rows to q (under mu: a job's rows keep
	// their order); one for all, so a decision allocates none.
	queued rowOut

	mu   sync.Mutex // jobs, breakers, the retry budget, the unnamed counter
	jobs map[string]*job
	// budget is retry.budget's window over this proxy's requests: the
	// retries of every job together (not shared between proxies).
	budget *admit.RetryBudget
	k      int
	wg     sync.WaitGroup // requests in flight, for Drain
}

// job is one logical request's books between its requests.
type job struct {
	id       string
	start    time.Time // its first request: the deadline is made here, once
	deadline time.Time
	track    admit.Track
	step     admit.RetryStep // the retry rules after its last failure
	stepSet  bool
	final    *admit.Decision // a refusal no later request can change
	seat     int
	rows     int
	// queue is the job's attempts whose rows are not written yet, in
	// attempt order (see release).
	queue  []slot
	end    string // the job_end its last row with one carried; "": none yet
	named  bool
	shared bool            // its books live in Options.Books
	sent   []admit.Attempt // what track took, kept for a shared book
	forget bool            // a sweep is done with it
}

// New builds a proxy. Errors name the config key at fault.
func New(o Options) (*Proxy, error) {
	if err := o.Policy.Validate(); err != nil {
		return nil, err
	}
	if len(o.Chain) == 0 {
		return nil, errors.New("fallback: no seat to send to")
	}
	if o.Sink == nil {
		o.Sink = func([]ledgerfile.Row) error { return nil }
	}
	if o.OnError == nil {
		o.OnError = func(error) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.MaxJobs <= 0 {
		o.MaxJobs = DefaultMaxJobs
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	p := &Proxy{opts: o, kind: o.Chain[0].Kind, sem: make(chan struct{}, o.MaxConcurrent), jobs: map[string]*job{},
		budget: admit.NewRetryBudget(o.Policy.Retry.Budget)}
	p.q = newRowQueue(o.Sink, o.OnError)
	p.queued = rowOut{p: p}
	for i, c := range o.Chain {
		switch c.Kind {
		case "openai", "anthropic", "ollama":
		default:
			return nil, fmt.Errorf("seats.%s.kind: the proxy fronts openai, anthropic or ollama seats, not %q", c.Name, c.Kind)
		}
		if c.Kind != p.kind {
			return nil, fmt.Errorf("seats.%s.kind: %s behind a proxy for %s clients (a fallback must speak the first seat's wire format)", c.Name, c.Kind, p.kind)
		}
		s, err := seat.NewWithOptions(c, seat.Options{Getenv: o.Getenv, Now: o.Now})
		if err != nil {
			return nil, err
		}
		s, rt, _ := seat.WithTransport(s, func(http.RoundTripper) http.RoundTripper { return transport{} })
		org, err := originOf(c.BaseURL)
		if err != nil {
			return nil, fmt.Errorf("seats.%s.base_url: %v", c.Name, err)
		}
		_, priced := c.Cost(0, 0)
		p.seats = append(p.seats, upstream{
			cfg: c, seat: s, origin: org, rt: rt, inject: c.APIKeyEnv != "",
			priced: priced, fallbck: i > 0,
		})
	}
	for i := range p.seats {
		u := &p.seats[i]
		u.br = admit.NewBreaker(o.Policy.Breaker, func(at time.Time, from, to admit.BreakerState) { p.breakerChanged(u, at, from, to) })
	}
	return p, nil
}

// breakerChanged is where the proxy learns of every transition of a
// seat's breaker (under p.mu): it keeps when the breaker opened, for the
// Retry-After of its refusals, and tells Options.OnBreaker. A transition
// is the seat's, not any one request's: no row's note carries it.
func (p *Proxy) breakerChanged(u *upstream, at time.Time, from, to admit.BreakerState) {
	if to == admit.Open {
		u.opened = at
	}
	if p.opts.OnBreaker != nil {
		p.opts.OnBreaker(u.cfg.Name, at, from, to)
	}
}

// recordBreaker takes a finished attempt's outcome into its seat's
// breaker, as the loop does (a cancelled attempt says nothing of the
// seat; a client error is the request's fault, not the seat's).
func recordBreaker(u *upstream, now time.Time, o *seat.Observation) {
	if o.Outcome != admit.Cancelled {
		u.br.Record(now, o.Outcome != admit.OK && o.Outcome != admit.ClientError)
	}
}

// cooldownLeft is how long until a seat from s on may let a request
// through: the least cooldown left of an open breaker along the chain;
// a half-open one whose probes are out, a second (their answers decide).
func (p *Proxy) cooldownLeft(s int, now time.Time) time.Duration {
	left := p.opts.Policy.Breaker.Cooldown
	for ; s < len(p.seats); s++ {
		u := &p.seats[s]
		d := time.Second
		if u.br.State(now) == admit.Open {
			d = u.opened.Add(p.opts.Policy.Breaker.Cooldown).Sub(now)
		}
		left = min(left, d)
	}
	return max(left, time.Millisecond) // rounded up to whole seconds when sent
}

// originOf is the scheme and host requests to base go to.
func originOf(base string) (*url.URL, error) {
	u, err := url.Parse(base)
	switch {
	case err != nil:
		return nil, errors.New("not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("scheme %q is not http or https", u.Scheme)
	case u.Hostname() == "":
		return nil, errors.New("no host")
	}
	for _, c := range u.Host {
		if c < 0x21 || c > 0x7e {
			return nil, errors.New("the host must be ASCII (write an international name in its xn-- form)")
		}
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// gated reports whether a request is a generation the gate times: the
// wire format's own endpoint, by POST. Anything else (a model list, say)
// passes through untimed and unlogged.
func (p *Proxy) gated(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	path := strings.TrimRight(r.URL.Path, "/")
	switch p.kind {
	case "anthropic":
		return strings.HasSuffix(path, "/messages")
	case "ollama":
		return strings.HasSuffix(path, "/api/chat") || strings.HasSuffix(path, "/api/generate")
	}
	return strings.HasSuffix(path, "/chat/completions")
}

// serve gates, forwards and logs one request, whose body ServeHTTP has
// read (within MaxBody: see tooLarge).
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	select {
	case p.sem <- struct{}{}:
	default:
		refusal{status: http.StatusServiceUnavailable, code: "busy", retryAfter: time.Second,
			message: fmt.Sprintf("retrygate: proxy busy: %d requests in flight", cap(p.sem))}.write(w, p.kind)
		return
	}
	p.wg.Add(1)
	defer func() { <-p.sem; p.wg.Done() }()

	if !p.gated(r) {
		p.passThrough(w, r, body)
		return
	}
	req, ok := parseRequest(body)
	if !ok {
		refusal{status: http.StatusBadRequest, code: "invalid_json", message: "retrygate: request body is not a JSON object"}.write(w, p.kind)
		return
	}
	id, named, bad := jobName(r.Header)
	if bad != "" {
		refusal{status: http.StatusBadRequest, code: "invalid_job", message: "retrygate: " + bad}.write(w, p.kind)
		return
	}
	clientRetry := retryCount(r.Header)
	a, ref, err := p.admit(r.Context(), id, named, &req, clientRetry)
	if err != nil {
		if r.Context().Err() == nil {
			p.opts.OnError(fmt.Errorf("the books of job %s: %w", id, err))
			refusal{status: http.StatusServiceUnavailable, code: "books_unavailable", retryAfter: time.Second,
				message: "retrygate: the job's books are out of reach; nothing was sent"}.write(w, p.kind)
		}
		return
	}
	if ref != nil {
		ref.write(w, p.kind)
		return
	}
	p.send(w, r, body, &req, a)
}

// tooLarge is the answer to a request body over MaxBody, in the
// provider's error shape.
func (p *Proxy) tooLarge(w http.ResponseWriter) {
	refusal{status: http.StatusRequestEntityTooLarge, code: "request_too_large",
		message: fmt.Sprintf("retrygate: request body over %d bytes", p.opts.MaxBody)}.write(w, p.kind)
}

// readBody reads a request body in one allocation when its length is
// declared (io.ReadAll grows from 512 bytes, copying a 40 KB chat seven
// times over).
func readBody(r io.Reader, declared, bound int64) ([]byte, error) {
	if declared <= 0 || declared > bound {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, declared+1) // +1: the read that sees the end
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // a body longer than declared: grow
		}
	}
}

// jobName is the job a request belongs to: X-Retrygate-Job, else
// Idempotency-Key, else none (each request its own job).
func jobName(h http.Header) (id string, named bool, bad string) {
	for _, k := range []string{headerJob, headerIdem} {
		v := strings.TrimSpace(h.Get(k))
		if v == "" {
			continue
		}
		if len(v) > maxJobID {
			return "", false, fmt.Sprintf("%s: longer than %d bytes", k, maxJobID)
		}
		for _, c := range v {
			if c < 0x21 || c > 0x7e {
				return "", false, fmt.Sprintf("%s: only printable ASCII without spaces", k)
			}
		}
		return v, true, ""
	}
	return "", false, ""
}

// retryCount is the client's own retry counter, or "" when it sent none
// (or something that is not a count).
func retryCount(h http.Header) string {
	v := strings.TrimSpace(h.Get(headerRetryCount))
	if v == "" {
		return ""
	}
	if n, err := strconv.Atoi(v); err != nil || n < 0 || n > admit.MaxAttempts {
		return ""
	}
	return v
}

// passThrough forwards a request the gate does not time (GET /v1/models)
// to the first seat's origin, unlogged.
func (p *Proxy) passThrough(w http.ResponseWriter, r *http.Request, body []byte) {
	u := &p.seats[0]
	ctx, cancel := context.WithTimeout(r.Context(), p.opts.Policy.Timeouts.Hard)
	defer cancel()
	f := p.forward(w, r, u, body)
	defer f.finish()
	hreq := (&http.Request{Method: r.Method, Header: http.Header{}}).WithContext(context.WithValue(ctx, forwardKey{}, f))
	if u.inject {
		// The seat's own key, as its wire format sends it.
		k := p.opts.Getenv(u.cfg.APIKeyEnv)
		if u.cfg.Kind == "anthropic" {
			hreq.Header.Set("X-Api-Key", strings.TrimSpace(k))
		} else {
			hreq.Header.Set("Authorization", "Bearer "+strings.TrimSpace(k))
		}
	}
	resp, err := transport{}.RoundTrip(hreq)
	if err != nil {
		if r.Context().Err() != nil {
			panic(http.ErrAbortHandler) // a client that hung up gets no made-up answer
		}
		refusal{status: http.StatusBadGateway, code: "upstream", message: "retrygate: upstream unreachable"}.write(w, p.kind)
		return
	}
	_ = resp.Body.Close() // releases only
	if f.rest(ctx) || f.failed() {
		panic(http.ErrAbortHandler) // a cut answer must not look whole
	}
}

// SetRun sets the run whose number names unnamed jobs (r<run>-<k>); the
// command learns it from the log after the proxy is built.
func (p *Proxy) SetRun(run int) {
	p.mu.Lock()
	p.opts.Run = run
	p.mu.Unlock()
}
