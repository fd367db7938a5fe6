package cmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/proxy"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// defaultProxyListen is where the proxy listens without --listen.
const defaultProxyListen = "127.0.0.1:6557"

// ProxyOptions is one `proxy`: the policy in front of one seat. The
// embedded proxy.Options takes the flags' limits, the policy and the
// chain; runProxy adds the log's sinks and the breaker's events.
type ProxyOptions struct {
	proxy.Options
	IO  *IOStreams
	Ctx context.Context // draining starts when it is done (Ctrl-C, SIGTERM)

	// Metrics is --metrics, where /metrics, /healthz and /readyz are
	// served ("": off); MetricsRemote, that it is off loopback.
	Metrics       string
	MetricsRemote bool

	Thresholds []rehearse.Threshold
	Skipped    []string  // fallbacks left out (another wire format)
	Places     keyPlaces // where the chain's keys were written, for errors
	Listen     string
	Remote     bool // --listen names an address off loopback
	LogPath    string
}

func newProxyCmd(f *Factory, runF func(*ProxyOptions) error) *cobra.Command {
	opts := &ProxyOptions{IO: f.IO}
	var budgetKeys map[string]string
	var seatName, retention string
	c := &cobra.Command{
		Use:   "proxy [--listen 127.0.0.1:PORT] [--seat NAME]",
		Short: "Enforce the policy on live traffic: an HTTP gateway in front of one seat",
		Long: `Enforce the rehearsed policy where the calls are made: an HTTP gateway in
front of one openai, anthropic or ollama seat of the policy file. Point an
application's base URL at it; bodies and streams pass through.

It serves the wire format's own routes only (docs/proxy.md): each
generation request (POST {base}/chat/completions or {base}/responses,
{base}/messages, /api/chat, /api/generate) is one attempt of a job, and
one row in the log; a model list and the like pass through ungated, each
one "# event request" line. Any other request is 405 (a route's path,
another method) or 404, or with --pass-unknown forwarded ungated and
logged. The path goes upstream cleaned, as it was routed.

The job is named by the X-Retrygate-Job header, else Idempotency-Key;
with neither, each request is a job of its own (named p<run>-<k>, a
form no client may use: 400). The deadline is made at a job's first
request and inherited by every later one. The SDK's own retry counter
(X-Stainless-Retry-Count) is logged as client_retry.

Before forwarding, the gate runs as in rehearse (the same estimate, the
same retry rules, breaker and fallback chain). A job whose deadline is
gone gets 504; one whose attempts, tokens or spend are used up, whose
last failure may not be retried, or whose seats' breakers are all open
gets 503 with the reason. Both carry an error body in the provider's own
shape, so the official SDKs raise their typed API error; x-should-retry:
false tells them not to retry a refusal no later request can undo, and
Retry-After is sent only for an open breaker.

Each forwarded attempt is timed like a seat (ttfb, wait to the first
content, elapsed, tokens from usage, else counted locally) with a hard
timeout of min(timeouts.hard, what is left of the deadline) that cancels
the upstream request: 504 before the answer's headers, a dropped
connection after them. An OpenAI stream with no stream_options is sent
with stream_options.include_usage, so the client sees one extra chunk
with "choices":[] and the usage before [DONE].

With a file log, one proxy keeps its jobs' books in memory, and holds
LOG.lock while it runs: a second proxy on the same file log exits 2,
naming the first one's pid (record and rehearse still append beside
it). With a
PostgreSQL log (--log postgres://...), named jobs' books live in that
database: a job's deadline, attempts, tokens and spend are read and
charged there under the job's lock, so every proxy on the database
shares one budget per job (each proxy keeps its own circuit breakers).

The client's Authorization or x-api-key is forwarded and never logged;
a seat with api_key_env sends its own key instead.

It listens on loopback unless --listen names another address (warned
about). Its limits hold before the work they bound: past --max-conns
connections a new one waits to be accepted; past --max-concurrent
requests 503 with Retry-After; a body declared over --max-body 413
before it is read; past --max-body-total bytes of bodies held at once a
request waits up to a second, then 503 with Retry-After, its body never
read; header blocks over 64 KiB 431. A job is remembered until its
deadline plus --job-retention, and named again after that gets 410
(job_forgotten), never a second attempt 1; at most --max-jobs at once
(503 for a new job past it), and at most --max-client-jobs from one client (429), both
with Retry-After. One client has at most --max-client-concurrent
requests in flight, and their part of --max-body-total in bodies (429). A client is its address's prefix: an IPv4
/32 and an IPv6 /64 unless --client-prefix-v4 or --client-prefix-v6
says otherwise; in a full table, a client holding fewer jobs than
another takes the place of that client's oldest idle job. Every answer the proxy makes itself has a
row or an event line (docs/proxy.md lists the limits). Ctrl-C or SIGTERM
drains: requests in flight finish or are cut at their deadline, every
row is written, and jobs still open get the row that ends them.

When the log cannot take rows (a full disk, the log removed or
replaced, a database outage), answers still go out and their rows wait
in memory (at most --max-held), written first by every later write: a
removed or replaced log is opened again at its path. Rows lost past the
bound, or still waiting when the proxy stops, are counted and printed
on stderr, and the last line says how many (exit 1).

With --metrics ADDR it also serves Prometheus metrics (/metrics), counted
from the rows and breaker events it logs, so they agree with report, and
/healthz and /readyz (ready: the log takes rows), on loopback unless ADDR
names another address. Each breaker change of state is an event line of
the log and a line on stderr.

Like a sidecar beside the application it fronts, it runs on half the
CPUs (at least one) unless GOMAXPROCS is set, and collects garbage at
GOGC=400 unless GOGC is set (docs/proxy.md).

With --shadow it enforces nothing: each generation request is forwarded
once to the first seat, as a plain pass-through (no wait, retry, failover
or refusal, no timeout of the policy's; the client gets the provider's
answer as it came), while the policy runs beside it on what was sent.
Each row's would= says what the policy would have done: admit, refuse:
<reason>, retry or fallback. check on that log says what enforcing would
change. Watch a policy on live traffic, then turn it on.

The first line of stdout is the base URL to give a client.` + exitStatus(
			"served until Ctrl-C or SIGTERM, every row written", "served until stopped, but rows never reached the log (the last line says how many, and why)"),
		Example: `  # the config's fallback chain, on the default port
  retrygate proxy

  # one seat, on another port; then: OPENAI_BASE_URL=http://127.0.0.1:7000/v1
  retrygate proxy --seat scratch --listen 127.0.0.1:7000

  # with Prometheus metrics: curl http://127.0.0.1:9464/metrics
  retrygate proxy --metrics 127.0.0.1:9464

  # watch the policy on live traffic before it acts; then: retrygate check
  retrygate proxy --shadow`,
		Args: cobra.NoArgs,
		RunE: runE(opts, func(c *cobra.Command, _ []string) error { return opts.fill(f, c, budgetKeys, seatName, retention) }, runF, runProxy),
	}
	budgetKeys = budgetFlags(c)
	fl := c.Flags()
	fl.StringVar(&opts.Listen, "listen", defaultProxyListen, "listen on `addr` (loopback unless named here)")
	fl.StringVar(&opts.Metrics, "metrics", "", "serve Prometheus /metrics, /healthz and /readyz on `addr` (off by default; docs/proxy.md)")
	fl.StringVar(&seatName, "seat", "", "front this `seat` (a name under seats:; default the first of fallback:)")
	fl.StringVar(&opts.LogPath, "log", "", "rehearsal `log` to append to: a path, or a postgres:// URL that proxies share budgets through (default rehearsal.log; config log)")
	fl.Int64Var(&opts.MaxBody, "max-body", proxy.DefaultMaxBody, "largest request body, `n` bytes (413 past it)")
	fl.Int64Var(&opts.MaxBodyTotal, "max-body-total", proxy.DefaultMaxBodyTotal, "request bodies held at once, `n` bytes in all (503 past it)")
	fl.IntVar(&opts.MaxConcurrent, "max-concurrent", proxy.DefaultMaxConcurrent, "at most `n` requests in flight (503 past it)")
	fl.BoolVar(&opts.Shadow, "shadow", false, "forward each request once, as a plain pass-through, and log what the policy would have done (would=)")
	fl.BoolVar(&opts.PassUnknown, "pass-unknown", false, "forward requests off the wire format's routes ungated (logged) instead of 404")
	fl.IntVar(&opts.MaxJobs, "max-jobs", proxy.DefaultMaxJobs, "at most `n` jobs remembered at once (503 for a new job past it)")
	fl.IntVar(&opts.MaxClientJobs, "max-client-jobs", 0, "at most `n` jobs one client (an address's prefix) holds at once, 429 past it (default a quarter of --max-jobs)")
	fl.IntVar(&opts.MaxClientConcurrent, "max-client-concurrent", 0, "at most `n` requests in flight from one client (an address's prefix), 429 past it (default a quarter of --max-concurrent)")
	fl.IntVar(&opts.ClientPrefixV4, "client-prefix-v4", proxy.DefaultClientPrefixV4, "an IPv4 client is its address's first `n` bits (its share of slots and jobs)")
	fl.IntVar(&opts.ClientPrefixV6, "client-prefix-v6", proxy.DefaultClientPrefixV6, "an IPv6 client is its address's first `n` bits (its share of slots and jobs)")
	fl.StringVar(&retention, "job-retention", proxy.DefaultRetention.String(), "remember a job for `duration` past its deadline")
	fl.IntVar(&opts.MaxConns, "max-conns", proxy.DefaultMaxConns, "at most `n` client connections open (past it, a new one waits to be accepted)")
	fl.IntVar(&opts.MaxHeld, "max-held", proxy.DefaultMaxHeld, "hold at most `n` rows in memory while the log refuses writes (past it the oldest are lost, counted)")
	return c
}

func (o *ProxyOptions) fill(f *Factory, c *cobra.Command, budgetKeys map[string]string, seatName, retention string) error {
	o.Ctx, o.Now, o.Getenv = f.Ctx, f.Now, f.Getenv
	var err error
	if o.Retention, err = admit.ParseDuration(retention); err != nil || o.Retention <= 0 {
		if err == nil {
			err = fmt.Errorf("want more than 0, got %q", retention)
		}
		return badInput("--job-retention: %v", err)
	}
	switch {
	case o.MaxJobs < 1 || o.MaxJobs > 10_000_000:
		return badInput("--max-jobs: must be between 1 and 10000000, got %d", o.MaxJobs)
	case o.MaxClientJobs < 0 || o.MaxClientJobs > o.MaxJobs:
		return badInput("--max-client-jobs: must be between 1 and --max-jobs (%d), got %d", o.MaxJobs, o.MaxClientJobs)
	case c.Flags().Changed("seat") && strings.TrimSpace(seatName) == "":
		return badInput("--seat: empty seat name")
	case o.MaxBody < 1 || o.MaxBody > 1<<30:
		return badInput("--max-body: must be between 1 and %d bytes, got %d", 1<<30, o.MaxBody)
	case o.MaxBodyTotal < 1 || o.MaxBodyTotal > 1<<40:
		return badInput("--max-body-total: must be between 1 and %d bytes, got %d", int64(1)<<40, o.MaxBodyTotal)
	case o.MaxBody > o.MaxBodyTotal && c.Flags().Changed("max-body-total"):
		return badInput("--max-body: %d bytes is over --max-body-total (%d): no such body could be read", o.MaxBody, o.MaxBodyTotal)
	case o.MaxConcurrent < 1 || o.MaxConcurrent > 100_000:
		return badInput("--max-concurrent: must be between 1 and 100000, got %d", o.MaxConcurrent)
	case o.MaxClientConcurrent < 0 || o.MaxClientConcurrent > o.MaxConcurrent:
		return badInput("--max-client-concurrent: must be between 1 and --max-concurrent (%d), got %d", o.MaxConcurrent, o.MaxClientConcurrent)
	case o.ClientPrefixV4 < 1 || o.ClientPrefixV4 > 32:
		return badInput("--client-prefix-v4: must be between 1 and 32 bits, got %d", o.ClientPrefixV4)
	case o.ClientPrefixV6 < 1 || o.ClientPrefixV6 > 128:
		return badInput("--client-prefix-v6: must be between 1 and 128 bits, got %d", o.ClientPrefixV6)
	case o.MaxConns < 1 || o.MaxConns > 1_000_000:
		return badInput("--max-conns: must be between 1 and 1000000, got %d", o.MaxConns)
	case o.MaxHeld < 1 || o.MaxHeld > 10_000_000:
		return badInput("--max-held: must be between 1 and 10000000, got %d", o.MaxHeld)
	}
	o.MaxBodyTotal = max(o.MaxBodyTotal, o.MaxBody) // without --max-body-total, room for one largest body at least
	if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		return badInput("--listen: not host:port %q (e.g. 127.0.0.1:6557)", o.Listen)
	}
	o.Remote = seatserver.CheckLoopback(o.Listen) != nil // as --listen names it: the default is on loopback
	if err := o.checkMetricsAddr(); err != nil {
		return err
	}
	cfg, err := loadConfig(f, c, mergeFlags(budgetKeys, map[string]string{"log": "log"}))
	if err != nil {
		return err
	}
	var seats map[string]seat.Config
	if o.LogPath, o.Policy, seats, o.Thresholds, err = cfg.runSettings(); err != nil {
		return err
	}
	names := o.Policy.Fallback
	if seatName != "" {
		sc, err := cfg.seatNamed(seats, seatName)
		if err != nil {
			return err
		}
		names = append([]string{sc.Name}, slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == sc.Name })...)
	}
	if len(names) == 0 {
		return withHint(badInput("proxy: no seat to front"),
			"name one with --seat NAME, or list seats under fallback: [a, b] in "+DefaultConfigFile)
	}
	first := seats[names[0]]
	switch first.Kind {
	case "openai", "anthropic", "ollama":
	default:
		at := "--seat"
		if seatName == "" {
			at = cfg.where("fallback") + "[0]"
		}
		return badInput("%s: seat %q is kind %s; the proxy fronts an openai, anthropic or ollama seat", at, first.Name, first.Kind)
	}
	for _, n := range names {
		if s := seats[n]; s.Kind == first.Kind {
			o.Chain = append(o.Chain, s)
		} else {
			o.Skipped = append(o.Skipped, n)
		}
	}
	for i, rt := range o.Policy.Routes {
		for j, n := range rt.Fallback {
			sc := seats[n]
			if sc.Kind != first.Kind {
				return badInput("%s[%d].fallback[%d]: seat %q is kind %s; a proxy for %s clients sends only %s seats", cfg.where(rehearse.KeyRoutes), i, j, n, sc.Kind, first.Kind, first.Kind)
			}
		}
	}
	o.RouteSeats = routeSeats(o.Policy, seats, o.Chain)
	o.Places = cfg.places(append(slices.Clip(o.Chain), o.RouteSeats...))
	return nil
}

// routeSeats are the seats the policy's routes name that chain does not
// hold, in the routes' order.
func routeSeats(p rehearse.Policy, seats map[string]seat.Config, chain []seat.Config) []seat.Config {
	var out []seat.Config
	for _, rt := range p.Routes {
		for _, n := range rt.Fallback {
			in := func(s seat.Config) bool { return s.Name == n }
			if !slices.ContainsFunc(chain, in) && !slices.ContainsFunc(out, in) {
				out = append(out, seats[n])
			}
		}
	}
	return out
}

func runProxy(o *ProxyOptions) error {
	e := o.IO.ErrOut
	defer rehearse.RealTimeGC(o.Getenv)()
	defer proxy.SidecarProcs(o.Getenv)()
	defer proxy.MemoryLimit(o.Getenv, o.MaxBodyTotal)()
	ctx := o.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if !isDBLog(o.LogPath) {
		// A file log's books are kept in this process: a second proxy
		// on the file would keep books of its own, and each would give
		// a job its whole budget.
		release, err := ledgerfile.HoldLog(o.LogPath, os.Getpid())
		if err != nil {
			var held *ledgerfile.HeldError
			if errors.As(err, &held) {
				return withHint(badInput("proxy: %v: one proxy at a time keeps a file log's job books", err),
					"stop that proxy, give this one another --log, or run every proxy on one PostgreSQL log (docs/proxy.md)")
			}
			return badInput("proxy: --log: %v", err)
		}
		defer release()
	}
	lg, err := openRunLog(ctx, e, o.LogPath)
	if err != nil {
		return err
	}
	defer lg.Close()
	names := make([]string, len(o.Chain))
	for i, s := range o.Chain {
		names[i] = s.Name
	}
	m := o.newMetrics(lg)
	books := lg.books()
	sink, booksM := lg.appendRows, books
	if m != nil {
		sink, booksM = m.Sink(sink), m.Books(books)
	}
	w := o.watchLog(lg, m)
	po := o.Options
	po.Sink, po.Books, po.OnError, po.Events = sink, booksM, w.failed, lg.appendEvents
	po.OnLost, po.OnHeld = w.lost, w.held
	// A breaker changing state is a `# event breaker` line of the log,
	// as the attempt loop writes it, and a line on stderr. The proxy
	// keeps one per seat and model: the line names the model. It is
	// queued with the proxy's other event lines (OnBreaker runs under
	// the proxy's lock: a log that does not answer must not hold it).
	var px *proxy.Proxy
	po.OnBreaker = func(name, model string, at time.Time, from, to admit.BreakerState) {
		rehearse.BreakerEvents(name, func(ev *ledgerfile.Event) {
			if model != "" {
				ev.Extra = append(ev.Extra, ledgerfile.KV{Key: "model", Value: model})
			}
			px.LogEvent(ev)
			breakerLine(e, ev)
		})(at, from, to)
		if m != nil {
			m.Breaker(name, at, from, to)
		}
	}
	px, err = proxy.New(po)
	if err != nil {
		return o.Places.located(err)
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return badInput("--listen: cannot listen on %q: %v", o.Listen, unwrapListenErr(err))
	}
	defer ln.Close()
	startMetrics, stopMetrics, err := o.serveMetrics(m, e)
	if err != nil {
		return err
	}
	defer stopMetrics()
	mode := ""
	if o.Shadow {
		mode = " shadow=true"
	}
	run, err := lg.reserve(fmt.Sprintf("proxy seats=%s listen=%s%s", strings.Join(names, ","), ln.Addr(), mode))
	if err != nil {
		return badInputErr(err)
	}
	if err := lg.comment(rehearse.PolicyLine(run, o.Policy, o.Chain, o.RouteSeats, o.Thresholds)); err != nil {
		return badInputErr(err)
	}
	px.SetRun(run)
	if _, err := fmt.Fprintln(o.IO.Out, proxyBaseURL(o.Chain[0], ln.Addr())); err != nil {
		return err
	}
	if o.Remote {
		fmt.Fprintf(e, "retrygate: warning: listening on %s, off loopback: anyone who can reach it spends this policy's budget", ln.Addr())
		if o.Chain[0].APIKeyEnv != "" {
			fmt.Fprint(e, " with the seat's own key")
		}
		fmt.Fprintln(e)
	}
	for _, n := range o.Skipped {
		fmt.Fprintf(e, "retrygate: fallback seat %s left out: it speaks another wire format than %s\n", n, o.Chain[0].Kind)
	}
	shared := ""
	if books != nil {
		shared = " (job budgets shared with every proxy on it)"
	}
	fmt.Fprintf(e, "retrygate: proxy run r%d in front of %s (%s), appending to %s%s; Ctrl-C or SIGTERM drains\n",
		run, strings.Join(names, " → "), o.Chain[0].Kind, logDisplay(o.LogPath), shared)
	for _, rt := range o.Policy.Routes {
		fmt.Fprintf(e, "retrygate: route %s → %s\n", rt.Model, strings.Join(rt.Fallback, " → "))
	}
	if o.Shadow {
		fmt.Fprintf(e, "retrygate: shadow mode: each request goes once to %s as it came; the rows' would= says what the policy would have done\n", o.Chain[0].Name)
	}
	startMetrics()
	if err := px.Serve(ctx, ln, e); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return w.stopped(px.Rows())
}

// proxyBaseURL is the base URL a client is given: the proxy's origin and
// the seat's base path (the Anthropic SDK appends /v1/messages itself, so
// it gets the origin alone).
func proxyBaseURL(s seat.Config, addr net.Addr) string {
	origin := "http://" + addr.String()
	u, err := url.Parse(s.BaseURL)
	if err != nil || s.Kind == "anthropic" || s.Kind == "ollama" {
		return origin
	}
	return origin + strings.TrimRight(u.Path, "/")
}
