// Package proxy runs the policy's loop in front of a real provider
// (`retrygate proxy`): each client request drives its job through the
// one job machine (admit.Job), retrying, waiting and failing over inside
// the request, timing every attempt with the seat's own stopwatch and
// logging each as a row.
package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

const (
	headerJob        = "X-Retrygate-Job"
	headerIdem       = "Idempotency-Key"
	headerRetryCount = "X-Stainless-Retry-Count" // openai-go's and anthropic-sdk-go's alike
	// KeyClientRetry is the row key holding the client's own retry
	// counter (the official SDKs send X-Stainless-Retry-Count).
	KeyClientRetry = "client_retry"
	maxJobID       = 128
)

// Defaults for Options' limits.
const (
	DefaultMaxBody       = 8 << 20
	DefaultMaxBodyTotal  = 64 << 20
	DefaultMaxConcurrent = 256
	DefaultMaxConns      = 4096
	DefaultMaxJobs       = 100_000
	DefaultRetention     = 10 * time.Minute
)

// Options build a Proxy.
type Options struct {
	Policy rehearse.Policy
	// Chain is the seats a job may use, in order: the first is where
	// every job starts; the rest are the policy's fallbacks of the same
	// kind. All are openai, anthropic or ollama seats.
	Chain []seat.Config
	// RouteSeats are the seats the policy's routes name that Chain does
	// not hold. A request whose model a route matches (Policy.Route)
	// runs that route's chain; any other, Chain.
	RouteSeats []seat.Config
	Getenv     func(string) string
	// Sink appends rows to the log, in order, from one goroutine. A
	// failed write is reported to OnError and answers still go out: its
	// rows are held (at most MaxHeld) and written first by every later
	// write, and retried while none comes, so rows resume when the log
	// takes them again. Rows dropped past MaxHeld, or still held when the
	// proxy stops, go to OnLost with the reason; OnHeld is told how many
	// rows are held after each write (0 when none).
	Sink    func([]ledgerfile.Row) error
	OnError func(error)
	OnLost  func(rows []ledgerfile.Row, why LostReason)
	OnHeld  func(int)
	MaxHeld int // 0: DefaultMaxHeld
	// Now is the wall clock for rows' ts and the jobs' deadlines;
	// attempts are timed on the monotonic clock.
	Now func() time.Time
	Run int // requests naming no job become jobs p<Run>-<k>

	// Books, when set, keeps named jobs' books in a store that several
	// proxies share (PostgreSQL): each job's deadline, attempts, tokens and
	// spend are read and charged there under the job's lock, so proxies
	// in front of one database share one budget per job, and a lease in
	// the book runs one request of a job at a time across them. Nil keeps
	// them in this process (one proxy). Unnamed jobs stay in process
	// either way.
	Books store.Books

	// OnBreaker, when set, is told of every transition of a breaker: one
	// per seat and model the seat is sent (a deployment: see deployment).
	// It is called under the proxy's lock: it must not block or call the
	// proxy.
	OnBreaker func(seat, model string, at time.Time, from, to admit.BreakerState)

	// Rand is the retry backoff's jitter; nil: seeded from the clock.
	Rand *rand.Rand

	MaxBody       int64         // request body bound (413); 0: DefaultMaxBody
	MaxBodyTotal  int64         // bytes of request bodies held at once (503 past it); 0: DefaultMaxBodyTotal
	MaxConcurrent int           // requests at once (503 past it); 0: DefaultMaxConcurrent
	MaxConns      int           // client connections at once (past it, accepting waits); 0: DefaultMaxConns
	MaxJobs       int           // jobs remembered at once; 0: DefaultMaxJobs
	MaxClientJobs int           // jobs one client (its address's prefix) holds at once (429 past it); 0: MaxJobs/4
	Retention     time.Duration // how long a job is remembered past its deadline; 0: DefaultRetention
	// MaxClientConcurrent is the request slots one client (its
	// address's prefix) holds at once (429 past it); 0: MaxConcurrent/4.
	MaxClientConcurrent int
	// ClientPrefixV4 and ClientPrefixV6 are how many leading bits of a
	// remote address name its client, whose share of the request slots
	// and the job table it counts against; 0: DefaultClientPrefixV4,
	// DefaultClientPrefixV6 (see shares.go).
	ClientPrefixV4, ClientPrefixV6 int

	// PassUnknown forwards a request off the wire format's allow-list
	// ungated (and logged) instead of answering 404; see route.
	PassUnknown bool
	// Shadow forwards each generation request once, as a plain
	// pass-through, and logs what the policy would have done (would=;
	// shadow.go).
	Shadow bool
	// Events appends `# event request` lines (see logRequest), in order,
	// from one goroutine; nil drops them.
	Events func([]ledgerfile.Event) error
}

type upstream struct {
	cfg  seat.Config
	seat seat.Seat
	// responses (openai) times the Responses API's answers: the same
	// seat, reading typed events (seat.APIResponses).
	responses seat.Seat
	origin    *url.URL // scheme and host of base_url: the client's path is kept
	// rawQuery is base_url's query as written (Azure's api-version),
	// and queryKeys its keys: sent on every request (query). Never print it.
	rawQuery  string
	queryKeys map[string]bool
	rt        http.RoundTripper // the seat's own http.Transport
	inject    bool
}

// Proxy is the policy's loop in front of one seat and its fallbacks: an
// http.Handler, which Serve serves with net/http's server.
type Proxy struct {
	opts  Options
	kind  string
	seats []upstream
	sem   chan struct{} // request slots (MaxConcurrent)
	// shares is each client's part of them (MaxClientConcurrent), and
	// of the body budget (bodyShare).
	shares *clientShares
	// bodies bounds the bytes of request bodies read or held at once
	// (MaxBodyTotal), taken before a body is read.
	bodies *bodyBudget
	// routes is the wire format's allow-list (route.go).
	routes []route
	// def is the chain of a request no route takes (Options.Chain), as
	// indexes of seats; index, each seat's index by name.
	def    []int
	index  map[string]int
	q      *queue[ledgerfile.Row]
	events *queue[ledgerfile.Event]

	mu   sync.Mutex // the job table, the breakers, the retry budget, the jitter, the unnamed counter
	jobs map[string]*job
	// expiry is the named in-process jobs by when each is next due;
	// clients, the jobs each client holds, and holders, the same by how
	// many each holds, the most first (jobs.go).
	expiry  indexedHeap[*job]
	clients map[string]*holder
	holders indexedHeap[*holder]
	// forgot is the jobs forgotten early to make room (jobs.go).
	forgot forgotten
	// deployments are the breakers, one per seat and model (deployment.go).
	deployments map[deployKey]*deployment
	// budget is retry.budget's window over this proxy's requests: the
	// retries of every job together (shared books share theirs: BookShared).
	budget *admit.RetryBudget
	rng    *rand.Rand
	k      int
	wg     sync.WaitGroup // requests in flight, for Drain
	// inLease counts attempts whose row a failed book left in the
	// job's lease (booksLost).
	inLease atomic.Int64
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
	if o.OnLost == nil {
		o.OnLost = func([]ledgerfile.Row, LostReason) {}
	}
	if o.OnHeld == nil {
		o.OnHeld = func(int) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5eed))
	}
	orDefault(&o.MaxBody, DefaultMaxBody)
	orDefault(&o.MaxBodyTotal, DefaultMaxBodyTotal)
	o.MaxBody = min(o.MaxBody, o.MaxBodyTotal) // a body the budget cannot hold is too large
	orDefault(&o.MaxConcurrent, DefaultMaxConcurrent)
	orDefault(&o.MaxConns, DefaultMaxConns)
	orDefault(&o.MaxJobs, DefaultMaxJobs)
	orDefault(&o.MaxHeld, DefaultMaxHeld)
	orDefault(&o.Retention, DefaultRetention)
	orDefault(&o.MaxClientJobs, max(o.MaxJobs/4, 1))
	orDefault(&o.MaxClientConcurrent, max(o.MaxConcurrent/4, 1))
	orDefault(&o.ClientPrefixV4, DefaultClientPrefixV4)
	orDefault(&o.ClientPrefixV6, DefaultClientPrefixV6)
	if err := checkPrefixes(o.ClientPrefixV4, o.ClientPrefixV6); err != nil {
		return nil, err
	}
	shares := newClientShares(o.MaxClientConcurrent, bodyShare(&o))
	p := &Proxy{opts: o, shares: shares, kind: o.Chain[0].Kind, sem: make(chan struct{}, o.MaxConcurrent), jobs: map[string]*job{}, clients: map[string]*holder{},
		deployments: map[deployKey]*deployment{}, budget: admit.NewRetryBudget(o.Policy.Retry.Budget), rng: o.Rand}
	p.bodies = newBodyBudget(o.MaxBodyTotal)
	p.q = newQueue(o.Sink, o.OnError, o.OnLost, o.OnHeld, maxQueued, o.MaxHeld)
	if o.Events == nil {
		o.Events = func([]ledgerfile.Event) error { return nil }
	}
	p.events = newQueue(o.Events, o.OnError, func(es []ledgerfile.Event, why LostReason) {
		o.OnError(fmt.Errorf("%d event lines never reached the log (%s)", len(es), why))
	}, func(int) {}, maxEventsQueued, o.MaxHeld)
	p.routes = routes(p.kind, basePath(o.Chain[0].BaseURL))
	p.def = make([]int, len(o.Chain))
	p.index = map[string]int{}
	for i, c := range append(slices.Clip(o.Chain), o.RouteSeats...) {
		if i < len(o.Chain) {
			p.def[i] = i
		}
		p.index[c.Name] = i
		switch c.Kind {
		case "openai", "anthropic", "ollama":
		default:
			return nil, fmt.Errorf("seats.%s.kind: the proxy fronts openai, anthropic or ollama seats, not %q", c.Name, c.Kind)
		}
		if c.Kind != p.kind {
			return nil, fmt.Errorf("seats.%s.kind: %s behind a proxy for %s clients (a fallback must speak the first seat's wire format)", c.Name, c.Kind, p.kind)
		}
		chat := c
		if c.Kind == "openai" {
			chat.API = "" // the request's path picks the API (see readerFor)
		}
		s, err := seat.NewWithOptions(chat, seat.Options{Getenv: o.Getenv, Now: o.Now})
		if err != nil {
			return nil, err
		}
		// The seat's own transport: every attempt's exchange sends
		// through it (kept-alive connections, no resend of a written request).
		_, rt, _ := seat.WithTransport(s, func(own http.RoundTripper) http.RoundTripper { return own })
		var resp seat.Seat
		if c.Kind == "openai" {
			rc := c
			rc.API, rc.MaxTokensParam = seat.APIResponses, ""
			if resp, err = seat.NewWithOptions(rc, seat.Options{Getenv: o.Getenv, Now: o.Now}); err != nil {
				return nil, err
			}
		}
		org, err := originOf(c.BaseURL)
		if err != nil {
			return nil, fmt.Errorf("seats.%s.base_url: %v", c.Name, err)
		}
		u := upstream{cfg: c, seat: s, responses: resp, origin: org, rt: rt, inject: c.APIKeyEnv != ""}
		if u.rawQuery, u.queryKeys, err = queryOf(c.BaseURL); err != nil {
			return nil, fmt.Errorf("seats.%s.base_url: %v", c.Name, err)
		}
		p.seats = append(p.seats, u)
	}
	for i, rt := range o.Policy.Routes {
		for _, n := range rt.Fallback {
			if _, ok := p.index[n]; !ok {
				return nil, fmt.Errorf("routes[%d].fallback: seat %q is neither in the chain nor among the route seats", i, n)
			}
		}
	}
	return p, nil
}

// orDefault sets an option left at zero (or below) to its default.
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
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

// queryOf is base's query string as written and its keys, decoded.
func queryOf(base string) (string, map[string]bool, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, errors.New("not a valid URL")
	}
	if u.RawQuery == "" {
		return "", nil, nil
	}
	keys := map[string]bool{}
	for pair := range strings.SplitSeq(u.RawQuery, "&") {
		k, _, _ := strings.Cut(pair, "=")
		keys[k] = true
		if dk, err := url.QueryUnescape(k); err == nil {
			keys[dk] = true
		}
	}
	return u.RawQuery, keys, nil
}

// query is the query string a request whose client sent client goes
// upstream with: the seat's base_url query, then the client's pairs, but
// those of a key the seat's query sets: the seat's keys win (its
// api-version is the deployment's, whatever the client asked). Without a
// seat query, the client's goes as sent.
func (u *upstream) query(client string) string {
	if u.rawQuery == "" {
		return client
	}
	out := u.rawQuery
	for pair := range strings.SplitSeq(client, "&") {
		k, _, _ := strings.Cut(pair, "=")
		if pair == "" || u.queryKeys[k] {
			continue
		}
		if dk, err := url.QueryUnescape(k); err == nil && u.queryKeys[dk] {
			continue // the seat's key, spelled otherwise
		}
		out += "&" + pair
	}
	return out
}

// readBody reads a request body in one allocation when its length is
// declared (io.ReadAll grows from 512 bytes, copying a 40 KB chat seven
// times over).
func readBody(r io.Reader, declared, bound int64) ([]byte, error) {
	var b bytes.Buffer
	if declared > 0 && declared <= bound {
		b.Grow(int(declared) + bytes.MinRead) // ReadFrom reads to the end into MinRead bytes free
	}
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}

// jobName is the job a request belongs to: X-Retrygate-Job, else
// Idempotency-Key, else none (each request its own job). Either header
// sent twice, or with two values (a comma: a list, as HTTP folds a
// header sent twice), is bad: which one the client meant is not the
// proxy's to guess, and a front that keeps the other would put the
// request in another job.
func jobName(h http.Header) (id string, named bool, bad string) {
	for _, k := range []string{headerJob, headerIdem} {
		vs := h.Values(k)
		if len(vs) > 1 {
			return "", false, fmt.Sprintf("%s: sent %d times; send it once", k, len(vs))
		}
		if len(vs) == 0 {
			continue
		}
		v := strings.TrimSpace(vs[0])
		if v == "" {
			continue
		}
		if strings.Contains(v, ",") {
			return "", false, fmt.Sprintf("%s: two values (a comma); send one", k)
		}
		if len(v) > maxJobID {
			return "", false, fmt.Sprintf("%s: longer than %d bytes", k, maxJobID)
		}
		for _, c := range v {
			if c < 0x21 || c > 0x7e {
				return "", false, fmt.Sprintf("%s: only printable ASCII without spaces", k)
			}
		}
		if isOwnID(v) {
			// The proxy's own name for a request naming no job: a named
			// job of that form would share books and (job, attempt) rows
			// with one.
			return "", false, fmt.Sprintf("%s: %q has the form p<run>-<k> of the ids the proxy gives requests that name no job; name the job otherwise", k, v)
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

// LogCounts are the rows the log took, the rows held for it now (a
// failed write's, written first by the next), and the rows lost; and,
// with shared books, the attempts whose row the books could not take
// after the attempt (InLease): their lease holds it, and a proxy
// sweeping the books writes it once the lease expires.
type LogCounts struct {
	Written, Held, Lost int64
	InLease             int64
}

// Rows is LogCounts of the rows the proxy wrote through Sink (a shared
// book's rows are committed with the book, and counted there).
func (p *Proxy) Rows() LogCounts {
	return LogCounts{Written: p.q.written.Load(), Held: p.q.holding.Load(), Lost: p.q.dropped.Load(), InLease: p.inLease.Load()}
}

// SetRun sets the run whose number names unnamed jobs (p<run>-<k>); the
// command learns it from the log after the proxy is built.
func (p *Proxy) SetRun(run int) {
	p.mu.Lock()
	p.opts.Run = run
	p.mu.Unlock()
}
