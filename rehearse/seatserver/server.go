// Package seatserver plays a seat.Planner over real HTTP on loopback, in
// the OpenAI, Anthropic or Ollama wire format, with real delays; it
// records every request so a test can prove a cancellation reached it.
package seatserver

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrygate/retrygate/rehearse/seat"
)

// Request states in /_retrygate/requests.
const (
	StateInFlight  = "in_flight"
	StateFinished  = "finished"  // the plan played to its end (an error response included)
	StateCancelled = "cancelled" // the client left before the plan finished
	StateReset     = "reset"     // the plan dropped the connection mid-stream
	StateDropped   = "dropped"   // conn_error: closed before a byte was written
	StateRejected  = "rejected"  // the request body was not JSON: a 400
	StateShutdown  = "shutdown"  // the server stopped while it was in flight
)

// RequestsPath serves every request so far as JSON.
const RequestsPath = "/_retrygate/requests"

// Options configure a Server.
type Options struct {
	Planner seat.Planner
	Format  Format
	// Log gets one line per client cancellation; nil discards them.
	Log io.Writer
	// Now stamps received/ended times; nil means time.Now. Delays and
	// durations use the monotonic clock regardless.
	Now func() time.Time
	// MaxBody bounds a request body; 0 means DefaultMaxBody.
	MaxBody int64
	// BodyTimeout bounds reading one request's body; 0 means
	// DefaultBodyTimeout. A client slower than that gets a 408.
	BodyTimeout time.Duration
	// Keep is how many request records /_retrygate/requests keeps (the
	// most recent); 0 means DefaultKeep.
	Keep int
	// Slots > 0 serves at most Slots requests at once, as a model server
	// with that many batch slots: a request past them queues, and its
	// plan's clock (ttfb, wait, elapsed) starts when a slot frees, so its
	// wait grows with the load. 0 serves every request at once.
	Slots int
}

// Limits that keep a long-running seat server's memory and connections
// bounded whatever its clients do.
const (
	DefaultMaxBody     = 16 << 20
	DefaultBodyTimeout = 10 * time.Second
	HeaderTimeout      = 10 * time.Second
	DefaultKeep        = 1000
)

// Record is one request as /_retrygate/requests reports it. It holds no
// prompt, completion, Authorization or x-api-key value: the idempotency
// key is a job id, not a secret.
type Record struct {
	Index          int       `json:"index"`
	Received       time.Time `json:"received"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Format         Format    `json:"format"`
	// API is "responses" for a request to /v1/responses (the Responses
	// API), "" for the format's own endpoint.
	API       string    `json:"api,omitempty"`
	Plan      string    `json:"plan"`
	Status    int       `json:"status"` // HTTP status served; 0 when no headers went out
	State     string    `json:"state"`
	Finished  bool      `json:"finished"`
	Cancelled bool      `json:"cancelled"`
	Ended     time.Time `json:"ended,omitzero"`
	// AfterS is seconds from arrival to the end (or to now while in flight).
	AfterS float64 `json:"after_s"`
	Bytes  int64   `json:"bytes"` // response body bytes written

	start time.Time // monotonic
	// model is what a request to /v1/responses asked for ("" for any
	// other), kept for GET /v1/responses/{id}.
	model string
}

// Server answers chat requests by playing the n-th plan for the n-th request.
type Server struct {
	opts  Options
	mu    sync.Mutex
	recs  []*Record // the last opts.Keep records, oldest first
	total int       // every request so far
	// log writes the cancellation lines and net/http's own complaints (a
	// client's malformed request line) to Options.Log, one at a time.
	log      *log.Logger
	stopping atomic.Bool
	slots    chan struct{} // Options.Slots' semaphore; nil: no limit
}

// New returns a server; it listens only when Serve is called.
func New(opts Options) (*Server, error) {
	if opts.Planner == nil {
		return nil, errors.New("seatserver: no planner")
	}
	if _, err := ParseFormat(string(opts.Format)); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	srv := &Server{opts: opts, log: log.New(opts.Log, "seat: ", 0)}
	if opts.Slots > 0 {
		srv.slots = make(chan struct{}, opts.Slots)
	}
	return srv, nil
}

// Handler routes the format's endpoint and /_retrygate/requests.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+RequestsPath, s.serveRequests)
	mux.HandleFunc(s.opts.Format.Path(), func(w http.ResponseWriter, r *http.Request) { s.serveChat(w, r, false) })
	on := s.opts.Format.Path()
	if s.opts.Format == OpenAI {
		// The Responses API, on the same base URL as Chat Completions.
		mux.HandleFunc(ResponsesPath, func(w http.ResponseWriter, r *http.Request) { s.serveChat(w, r, true) })
		mux.HandleFunc("GET "+ResponsesPath+"/{id}", s.serveResponse)
		on += " and " + ResponsesPath
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody(s.opts.Format, http.StatusNotFound, "",
			"no such endpoint: this seat server speaks "+string(s.opts.Format)+" on "+on))
	})
	return mux
}

// Serve answers on ln until ctx is done, then stops: in-flight requests
// (a hang would otherwise hold the shutdown forever) are ended at once
// and marked shutdown, and Serve returns nil.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	base, stop := context.WithCancel(context.Background())
	defer stop()
	hs := &http.Server{
		Handler:           s.Handler(),
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: HeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          s.log, // not the process's stderr log
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.stopping.Store(true)
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Requests returns a copy of the most recent requests (at most
// Options.Keep), in arrival order.
func (s *Server) Requests() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.recs))
	for _, r := range s.recs {
		rec := *r
		if r.State == StateInFlight {
			rec.AfterS = round3(time.Since(r.start).Seconds())
		}
		out = append(out, rec)
	}
	return out
}

// Total is how many requests the server has received.
func (s *Server) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// RequestsResponse is the body of GET /_retrygate/requests.
type RequestsResponse struct {
	Format Format `json:"format"`
	// Total is every request so far; Requests holds the last Kept of them.
	Total    int      `json:"total"`
	Kept     int      `json:"kept"`
	Requests []Record `json:"requests"`
}

func (s *Server) serveRequests(w http.ResponseWriter, r *http.Request) {
	recs := s.Requests()
	body, _ := json.MarshalIndent(RequestsResponse{Format: s.opts.Format, Total: s.Total(), Kept: s.opts.Keep, Requests: recs}, "", "  ")
	writeJSON(w, http.StatusOK, append(body, '\n'))
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func round3(f float64) float64 {
	return float64(int64(f*1000+0.5)) / 1000
}

// maxKey bounds the idempotency key kept per request.
const maxKey = 200

func (s *Server) begin(r *http.Request, start time.Time) (*Record, seat.Plan) {
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxKey {
		key = key[:maxKey]
	}
	s.mu.Lock()
	rec := &Record{
		Index: s.total, Received: s.opts.Now(), IdempotencyKey: key,
		Format: s.opts.Format, State: StateInFlight, start: start,
	}
	s.recs = append(s.recs, rec)
	if len(s.recs) > s.opts.Keep {
		s.recs = s.recs[1:] // the oldest goes
	}
	s.total++
	s.mu.Unlock()
	// The planner runs outside the lock: a scripted planner is cheap, but
	// a modelled one need not be.
	p := s.opts.Planner.PlanFor(rec.Index)
	s.mu.Lock()
	rec.Plan = Summary(p)
	s.mu.Unlock()
	return rec, p
}

func (s *Server) end(rec *Record, state string) {
	after := time.Since(rec.start)
	if state == StateCancelled {
		// The line first: whoever sees the record cancelled finds it logged.
		// (Index is set before the record is shared and never changes.)
		s.log.Printf("request %d cancelled by client after %.3fs", rec.Index, after.Seconds())
	}
	s.mu.Lock()
	rec.State = state
	rec.Ended = rec.Received.Add(after)
	rec.AfterS = round3(after.Seconds())
	rec.Cancelled = state == StateCancelled
	rec.Finished = state == StateFinished || state == StateReset || state == StateDropped || state == StateRejected
	s.mu.Unlock()
}

func (s *Server) serveChat(w http.ResponseWriter, r *http.Request, responses bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody(s.opts.Format, http.StatusMethodNotAllowed, "", "use POST"))
		return
	}
	start := time.Now()
	rec, plan := s.begin(r, start)
	if s.slots != nil {
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		case <-r.Context().Done():
			s.end(rec, StateCancelled) // left while queued for a slot
			return
		}
		start = time.Now() // the plan plays from when a slot took it
	}
	p := &player{s: s, w: w, r: r, rc: http.NewResponseController(w), rec: rec, plan: plan, start: start, responses: responses}
	p.run()
}

// serveResponse is GET /v1/responses/{id}: the Response a request to
// /v1/responses that played to its end was answered with, whole, rebuilt
// from its plan (a planner's n-th plan is always the same). Any other id,
// or a request no longer kept (Options.Keep), is a 404.
func (s *Server) serveResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var rec Record
	s.mu.Lock()
	for _, x := range s.recs {
		if x.model != "" && responseID(x.Index) == id {
			rec = *x
		}
	}
	s.mu.Unlock()
	var p seat.Plan
	if rec.model != "" {
		p = s.opts.Planner.PlanFor(rec.Index)
	}
	if rec.model == "" || rec.State != StateFinished || rec.Status != http.StatusOK || p.ErrorCode != "" {
		writeJSON(w, http.StatusNotFound, errorBody(s.opts.Format, http.StatusNotFound, "", "no response with that id"))
		return
	}
	wire := &responsesWire{base: base{model: rec.model, index: rec.Index, now: rec.Received}}
	writeJSON(w, http.StatusOK, wire.whole(filler(0, wordsOf(p)), usageOf(p)))
}

// player plays one plan on one request.
type player struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	rc     *http.ResponseController
	rec    *Record
	plan   seat.Plan
	start  time.Time
	wire   wire
	stream bool
	// responses: the request came to /v1/responses (the Responses API).
	responses bool
}

func (p *player) run() {
	if p.plan.ConnError {
		p.drop(StateDropped)
		return
	}
	// Reading the whole body matters beyond parsing it: net/http only
	// watches for the client going away once the body is consumed.
	// The body has BodyTimeout to arrive; the deadline is lifted once it
	// has, so a long plan is never cut by it.
	_ = p.rc.SetReadDeadline(time.Now().Add(p.s.opts.BodyTimeout))
	data, err := io.ReadAll(http.MaxBytesReader(p.w, p.r.Body, p.s.opts.MaxBody))
	if err == nil {
		// Kept on failure: net/http drains an unread body after the
		// handler, and the deadline stops a slow client holding that open.
		_ = p.rc.SetReadDeadline(time.Time{})
	}
	var req chatRequest
	decodeErr := err == nil
	if err == nil {
		err = json.Unmarshal(data, &req)
	}
	clear(data) // the prompt: gone as soon as it is not needed
	var timeout net.Error
	slow := errors.As(err, &timeout) && timeout.Timeout()
	if err != nil && !slow && p.r.Context().Err() != nil {
		p.stopped() // the client left while sending
		return
	}
	if err != nil {
		status, msg := http.StatusBadRequest, "request body is not a JSON object"
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			status, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", p.s.opts.MaxBody)
		} else if slow {
			status, msg = http.StatusRequestTimeout, fmt.Sprintf("request body not received within %s", p.s.opts.BodyTimeout)
			p.w.Header().Set("Connection", "close")
		} else if !decodeErr {
			msg = "request body could not be read"
		}
		p.setStatus(status)
		p.s.end(p.rec, StateRejected)
		writeJSON(p.w, status, errorBody(p.s.opts.Format, status, "", msg))
		return
	}
	p.wire = newWire(p.s.opts.Format, p.responses, req, p.rec.Index, p.s.opts.Now)
	if p.responses {
		p.s.mu.Lock()
		p.rec.model = cmp.Or(req.Model, "retrygate-seat")
		p.rec.API = "responses"
		p.s.mu.Unlock()
	}
	p.stream = streaming(p.s.opts.Format, req)
	steps, resetAt := timeline(p.plan, p.stream)
	ctx := p.r.Context()
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for i, st := range steps {
		if resetAt > 0 && (st.at > resetAt || st.at == resetAt && !st.beforeReset()) {
			if st.at == resetAt && (st.kind == stepError || st.kind == stepWhole) {
				// The status line makes it out; the body does not.
				if !p.sleepUntil(ctx, timer, st.at) {
					return
				}
				p.headers(p.status(), "application/json")
				if err := p.rc.Flush(); err != nil {
					p.stopped()
					return
				}
			}
			break
		}
		if !p.sleepUntil(ctx, timer, st.at) {
			return
		}
		last := i == len(steps)-1 && resetAt == 0 && !p.plan.Hang
		if last {
			// Recorded before the last write, so a client that has read the
			// whole response already finds it finished.
			p.s.end(p.rec, StateFinished)
		}
		if err := p.do(st); err != nil {
			p.stopped()
			return
		}
		if last {
			return
		}
	}
	if resetAt > 0 {
		if !p.sleepUntil(ctx, timer, resetAt) {
			return
		}
		p.drop(StateReset)
		return
	}
	if p.plan.Hang {
		<-ctx.Done()
		p.stopped()
		return
	}
	p.s.end(p.rec, StateFinished)
}

// sleepUntil waits for at in the plan; false, with the request ended,
// when the client left first.
func (p *player) sleepUntil(ctx context.Context, t *time.Timer, at time.Duration) bool {
	if d := time.Until(p.start.Add(at)); d > 0 {
		t.Reset(d)
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			t.Stop()
		}
	} else if ctx.Err() == nil {
		return true
	}
	p.stopped()
	return false
}

// stopped ends a request whose context was cancelled or whose write failed.
func (p *player) stopped() {
	if p.s.stopping.Load() {
		p.s.end(p.rec, StateShutdown)
		return
	}
	p.s.end(p.rec, StateCancelled)
}

func (p *player) setStatus(status int) {
	p.s.mu.Lock()
	p.rec.Status = status
	p.s.mu.Unlock()
}

// drop closes the connection without finishing the response: before any
// byte for a conn_error, mid-stream for a reset.
func (p *player) drop(state string) {
	conn, _, err := p.rc.Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the stream instead.
		p.s.end(p.rec, state)
		panic(http.ErrAbortHandler)
	}
	// Recorded first, so a client that sees the close already finds it
	// in /_retrygate/requests.
	p.s.end(p.rec, state)
	_ = conn.Close()
}

func (p *player) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	n, err := p.w.Write(b)
	p.s.mu.Lock()
	p.rec.Bytes += int64(n)
	p.s.mu.Unlock()
	if err != nil {
		return err
	}
	return p.rc.Flush()
}

func (p *player) headers(status int, contentType string) {
	h := p.w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-cache")
	id := "req_retrygate" + strconv.Itoa(p.rec.Index)
	h.Set("x-request-id", id)
	h.Set("request-id", id)
	if status != http.StatusOK && p.plan.HasRetryAfter {
		// Whole seconds for Retry-After (rounded up, so a client never
		// comes back early), milliseconds for OpenAI's retry-after-ms.
		ra := p.plan.RetryAfter
		h.Set("Retry-After", strconv.FormatInt(int64((ra+time.Second-1)/time.Second), 10))
		h.Set("retry-after-ms", strconv.FormatInt(ra.Milliseconds(), 10))
	}
	rateLimitHeaders(h, p.s.opts.Format, p.plan.RateLimit, p.s.opts.Now())
	p.w.WriteHeader(status)
	p.setStatus(status)
}

func (p *player) do(st step) error {
	u := usageOf(p.plan)
	switch st.kind {
	case stepHeaders:
		ct := "application/json"
		if p.stream {
			ct = p.s.opts.Format.streamContentType()
		}
		p.headers(http.StatusOK, ct)
		if p.stream {
			if err := p.write(p.wire.preamble(u)); err != nil {
				return err
			}
		}
		// Flushed even with no preamble (Ollama): the headers go out now.
		return p.rc.Flush()
	case stepContent:
		return p.write(p.wire.content(st.text))
	case stepFinish:
		return p.write(p.wire.finish(u))
	case stepStreamError:
		return p.write(p.wire.streamError(p.plan.ErrorCode))
	case stepError:
		status := p.status()
		p.headers(status, "application/json")
		return p.write(errorBody(p.s.opts.Format, status, p.plan.ErrorCode, ""))
	case stepWhole:
		p.headers(p.status(), "application/json")
		return p.write(p.wire.whole(st.text, u))
	}
	return nil
}

// status is the status a whole (non-streamed) response goes out with.
func (p *player) status() int {
	status := p.plan.Status
	if status == 0 || status == http.StatusOK {
		if p.plan.ErrorCode == "" {
			return http.StatusOK
		}
		// An error code on a whole 200: no 200 body carries one, so it goes
		// out as the status the API itself would use.
		if p.plan.ErrorCode == "overloaded_error" {
			return 529
		}
		return http.StatusInternalServerError
	}
	return status
}
