package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// The fault matrix: the scorecard's 16 gateway faults, each sent as a
// streamed request through one shared proxy, under one policy with a
// fallback seat, to a provider that fails on purpose (hostile), on
// 127.0.0.1 with small real delays. The policy is a production one
// scaled down: "20 s" and "a minute" become the numbers below, and the
// Retry-After is 1 (it is whole seconds).

// hostileWords is how many content chunks a whole answer has.
const hostileWords = 60

// faultPolicy is the one policy of the matrix.
func faultPolicy() rehearse.Policy {
	p := rehearse.DefaultPolicy()
	p.Budget = admit.Budget{Deadline: 8 * time.Second, TokenCeiling: 100_000, MaxAttempts: 3, MaxWait: 400 * ms}
	p.Retry = admit.RetryPolicy{BaseDelay: 50 * ms, MaxDelay: 200 * ms, SlowServerAfter: 3 * time.Second, HonorRetryAfter: true, TimeoutsRetried: 1}
	p.Timeouts = rehearse.Timeouts{Hard: 1500 * ms, Stall: 300 * ms}
	p.Breaker = admit.BreakerConfig{Window: 2 * time.Second, FailureRate: 0.5, MinRequests: 4, Cooldown: 400 * ms, HalfOpenProbes: 1}
	return p
}

// arrival is one request a hostile provider saw.
type arrival struct {
	model, fault string
	at           time.Time
}

// hostile is a provider failing on purpose: a request's behaviour is
// its fault class's (the client's X-Fault header), by how many requests
// of that class came before it; a request of no class is answered
// whole. It answers in OpenAI's chat stream format, words <name>1 …
// <name>60 with a finish reason, usage and [DONE].
type hostile struct {
	name  string
	mu    sync.Mutex
	seen  []arrival
	calls map[string]int
	// outage is how long class 10's outage lasts from its first request.
	outage time.Duration
	since  time.Time
}

func newHostile(t *testing.T, name string) (*hostile, string) {
	t.Helper()
	h := &hostile{name: name, calls: map[string]int{}, outage: 1200 * ms}
	srv := &http.Server{Handler: h}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return h, "http://" + ln.Addr().String() + "/v1"
}

// saw is the requests of class fault, in order.
func (h *hostile) saw(fault string) []arrival {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []arrival
	for _, a := range h.seen {
		if a.fault == fault {
			out = append(out, a)
		}
	}
	return out
}

func (h *hostile) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &req)
	fault := r.Header.Get("X-Fault")
	h.mu.Lock()
	n := h.calls[fault]
	h.calls[fault]++
	h.seen = append(h.seen, arrival{model: req.Model, fault: fault, at: time.Now()})
	if fault == "10" && n == 0 {
		h.since = time.Now()
	}
	down := fault == "10" && time.Since(h.since) < h.outage
	h.mu.Unlock()
	prefill := len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == "assistant"
	if h.name == "spare" {
		// A seat that takes a prefill: it goes on from the words the
		// trailing assistant message has.
		from := 0
		if prefill {
			from = len(strings.Fields(req.Messages[len(req.Messages)-1].Content))
		}
		h.stream(w, req.Model, hostileWords, streamEnd{done: true, from: from})
		return
	}
	if h.name == "fallback" {
		if prefill {
			// Class 16's fallback: it takes no assistant prefill.
			errorAnswer(w, 400, "invalid_request_error", "prefill_not_supported")
			return
		}
		h.stream(w, req.Model, hostileWords, streamEnd{done: true})
		return
	}
	switch fault {
	case "01":
		if n == 0 {
			w.Header().Set("Retry-After", "1")
			errorAnswer(w, 429, "rate_limit_error", "rate_limit_exceeded")
			return
		}
	case "02":
		errorAnswer(w, 429, "rate_limit_error", "rate_limit_exceeded")
		return
	case "03":
		if n == 0 {
			errorAnswer(w, 500, "server_error", "server_error")
			return
		}
	case "04":
		errorAnswer(w, 503, "server_error", "overloaded")
		return
	case "05":
		if n == 0 {
			reset(w, true) // read, then a TCP reset before any header
			return
		}
	case "06":
		if n == 0 {
			<-r.Context().Done() // no answer at all
			return
		}
	case "07":
		if n == 0 {
			// Headers and the role chunk at once, the first token long
			// after the wait cap ("after 20 s").
			h.stream(w, req.Model, hostileWords, streamEnd{done: true, firstAfter: 3 * time.Second, ctx: r})
			return
		}
	case "08":
		h.stream(w, req.Model, hostileWords, streamEnd{done: true, malformedAt: hostileWords / 2})
		return
	case "09":
		h.stream(w, req.Model, hostileWords, streamEnd{}) // finish reason and usage, then the end: no [DONE]
		return
	case "10":
		if down {
			errorAnswer(w, 503, "server_error", "overloaded")
			return
		}
	case "11":
		errorAnswer(w, 502, "server_error", "bad_gateway")
		return
	case "12":
		errorAnswer(w, 400, "invalid_request_error", "content_filter")
		return
	case "13":
		errorAnswer(w, 400, "invalid_request_error", "context_length_exceeded")
		return
	case "14", "16":
		h.stream(w, req.Model, 40, streamEnd{cut: true}) // 40 of 60 tokens, then the connection drops
		return
	case "14c":
		h.stream(w, req.Model, 40, streamEnd{clean: true}) // 40 of 60 tokens, then the body's end
		return
	case "15":
		// 20 tokens, then nothing. Paced: the seat charges a stall the
		// tokens generated since the last byte at the stream's own rate,
		// and 20 words in no time is a rate whose 300 ms would pass the
		// token ceiling.
		h.stream(w, req.Model, 20, streamEnd{stall: r, pace: 5 * ms})
		return
	}
	h.stream(w, req.Model, hostileWords, streamEnd{done: true})
}

// errorBody is a provider error in OpenAI's shape.
func errorBody(typ, code string) string {
	return fmt.Sprintf(`{"error":{"message":"the provider says %s","type":%q,"code":%q}}`, code, typ, code)
}

func errorAnswer(w http.ResponseWriter, status int, typ, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, errorBody(typ, code))
}

// reset drops the connection: with a TCP reset (rst), or closing it
// mid-body, so that the client reads every byte sent and then an end
// before the body's (a reset may discard bytes the client has not read).
func reset(w http.ResponseWriter, rst bool) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok && rst {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// streamEnd is how a hostile stream ends, and what it does on the way.
type streamEnd struct {
	done        bool          // [DONE] after the finish reason and usage
	cut         bool          // the connection drops after the words: no finish, no end of body
	clean       bool          // the body ends after the words: no finish, no [DONE]
	stall       *http.Request // after the words, nothing until the request ends
	firstAfter  time.Duration // the first word this long after the role chunk
	ctx         *http.Request // the request whose end stops a waiting stream
	malformedAt int           // >0: an event that is no JSON after this many words
	from        int           // the words a prefill has: the stream goes on from the next
	pace        time.Duration // between two words (a provider's pacing, not a clock)
}

func (h *hostile) stream(w http.ResponseWriter, model string, words int, end streamEnd) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	rc := http.NewResponseController(w)
	chunk := func(delta, finish string, usage bool) {
		fr := "null"
		if finish != "" {
			fr = `"` + finish + `"`
		}
		choices := `[{"index":0,"delta":` + delta + `,"finish_reason":` + fr + `}]`
		u := ""
		if usage {
			choices = "[]"
			u = fmt.Sprintf(`,"usage":{"prompt_tokens":12,"completion_tokens":%d,"total_tokens":%d}`, hostileWords, 12+hostileWords)
		}
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-%s\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":%s%s}\n\n", h.name, model, choices, u)
		_ = rc.Flush()
	}
	chunk(`{"role":"assistant","content":""}`, "", false)
	if end.firstAfter > 0 {
		select {
		case <-time.After(end.firstAfter):
		case <-end.ctx.Context().Done():
			return
		}
	}
	for i := end.from + 1; i <= words; i++ {
		if end.pace > 0 {
			time.Sleep(end.pace)
		}
		chunk(fmt.Sprintf(`{"content":"%s%d "}`, h.name, i), "", false)
		if i == end.malformedAt {
			_, _ = io.WriteString(w, "data: {\"id\":\"chatcmpl-x\",\"choices\":[{\"delta\":{\"content\":\"trunc\n\n")
			_ = rc.Flush()
		}
	}
	switch {
	case end.cut:
		reset(w, false)
		return
	case end.clean:
		return
	case end.stall != nil:
		<-end.stall.Context().Done()
		return
	}
	chunk(`{}`, "stop", false)
	chunk("", "", true)
	if end.done {
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// wholeText is the whole answer of the hostile seat named name.
func wholeText(name string) string {
	var b strings.Builder
	for i := 1; i <= hostileWords; i++ {
		fmt.Fprintf(&b, "%s%d ", name, i)
	}
	return b.String()
}

// caught is what a caller got: the answer's status and headers, and of
// a stream, every event parsed strictly as JSON (an event no JSON reader
// parses is an error the caller saw), its text, finish reason, usage
// and model, and whether it ended in [DONE]; err is why the body ended
// short (a cut connection), nil at a clean end.
type caught struct {
	status int
	header http.Header
	body   string // an answer that is no stream
	text   string
	finish string
	usage  *struct{ Prompt, Completion int64 }
	model  string
	ids    map[string]bool // the chunks' ids
	// finishes, usages, dones and roles count the finish reasons, usage
	// chunks, [DONE]s and role chunks.
	finishes, usages, dones, roles int
	done                           bool
	bad                            string // the first event that does not parse
	err                            error
}

// whole says the caller got a whole answer: a clean end, every event
// parsed, the finish reason and the usage.
func (c *caught) whole() bool {
	return c.status == 200 && c.err == nil && c.bad == "" && c.finish == "stop" && c.usage != nil
}

// ask sends a streamed chat request of model, in fault class fault
// (none: ""), as job job (none: ""), and reads the answer as a caller
// that does not retry.
func ask(t *testing.T, url, model, fault, job string) caught {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, model)
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if fault != "" {
		req.Header.Set("X-Fault", fault)
	}
	if job != "" {
		req.Header.Set(headerJob, job)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	require.NoError(t, err, "the caller got an answer's headers")
	defer resp.Body.Close()
	c := caught{status: resp.StatusCode, header: resp.Header}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, err := io.ReadAll(resp.Body)
		c.body, c.err = string(b), err
		return c
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok {
			if data == "[DONE]" {
				c.done = true
				c.dones++
			} else {
				var ev struct {
					ID      string `json:"id"`
					Model   string `json:"model"`
					Choices []struct {
						Delta struct {
							Role    string `json:"role"`
							Content string `json:"content"`
						} `json:"delta"`
						Finish *string `json:"finish_reason"`
					} `json:"choices"`
					Usage *struct {
						Prompt     int64 `json:"prompt_tokens"`
						Completion int64 `json:"completion_tokens"`
					} `json:"usage"`
				}
				if json.Unmarshal([]byte(data), &ev) != nil {
					if c.bad == "" {
						c.bad = data
					}
				} else {
					c.model = ev.Model
					if c.ids == nil {
						c.ids = map[string]bool{}
					}
					c.ids[ev.ID] = true
					for _, ch := range ev.Choices {
						c.text += ch.Delta.Content
						if ch.Delta.Role != "" {
							c.roles++
						}
						if ch.Finish != nil {
							c.finish = *ch.Finish
							c.finishes++
						}
					}
					if ev.Usage != nil {
						c.usages++
						c.usage = &struct{ Prompt, Completion int64 }{ev.Usage.Prompt, ev.Usage.Completion}
					}
				}
			}
		}
		if err != nil {
			if err != io.EOF {
				c.err = err
			}
			return c
		}
	}
}

// jobRows are the rows of job, in log order.
func jobRows(rs []ledgerfile.Row, job string) []ledgerfile.Row {
	var out []ledgerfile.Row
	for _, r := range rs {
		if r.Job == job {
			out = append(out, r)
		}
	}
	return out
}

// column is one field of rows, as text.
func column(rs []ledgerfile.Row, f func(r ledgerfile.Row) string) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func outcomeOf(r ledgerfile.Row) string {
	if r.Unsent {
		return r.Decision
	}
	return string(r.Outcome)
}

// gaps are the times between a class's requests as the provider saw
// them, in order across both seats.
func gaps(as ...[]arrival) []time.Duration {
	var all []time.Time
	for _, a := range as {
		for _, x := range a {
			all = append(all, x.at)
		}
	}
	for i := 1; i < len(all); i++ {
		for j := i; j > 0 && all[j].Before(all[j-1]); j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	var out []time.Duration
	for i := 1; i < len(all); i++ {
		out = append(out, all[i].Sub(all[i-1]))
	}
	return out
}

// slack is what a loaded machine may add to a wait on 127.0.0.1.
const slack = 400 * ms

func TestFaultMatrix(t *testing.T) {
	primary, pbase := newHostile(t, "primary")
	fallback, fbase := newHostile(t, "fallback")
	pol := faultPolicy()
	pcfg, fcfg := seatCfg("primary", "openai", pbase), seatCfg("fallback", "openai", fbase)
	pcfg.PriceIn, pcfg.PriceOut = 1, 2
	fcfg.PriceIn, fcfg.PriceOut = 3, 4
	fcfg.Model = "fallback-model"
	// The cut classes' models run a route whose last seat takes a
	// prefill: a cut stream is continued there (the fallback takes none).
	spare, sbase := newHostile(t, "spare")
	scfg := seatCfg("spare", "openai", sbase)
	scfg.PriceIn, scfg.PriceOut, scfg.Model, scfg.Prefill = 1, 2, "spare-model", true
	// liar says it takes a prefill and answers one with a 400, as the
	// fallback does.
	liar, lbase := newHostile(t, "fallback")
	lcfg := seatCfg("liar", "openai", lbase)
	lcfg.Prefill = true
	// Class 13's model runs a route whose second seat has the larger
	// context window: a context-length error goes there, once.
	pcfg.ContextWindow, scfg.ContextWindow = 8_000, 128_000
	pol.Routes = []rehearse.Route{
		{Model: "f13", Fallback: []string{"primary", "spare"}},
		{Model: "f1[4-6]", Fallback: []string{"primary", "fallback", "spare"}},
		{Model: "h14", Fallback: []string{"primary", "liar"}},
	}
	px := start(t, pol, []seat.Config{pcfg, fcfg}, func(o *Options) {
		o.Rand = rand.New(rand.NewPCG(34, 34))
		o.RouteSeats = []seat.Config{scfg, lcfg}
	})
	backoff := func(n int) time.Duration { return admit.BackoffCeiling(pol.Retry, n) + slack }

	// healthy: a plain request right after a fault is served whole, by
	// the primary.
	healthy := func(t *testing.T) {
		t.Helper()
		got := ask(t, px.url, "plain", "", "")
		assert.True(t, got.whole(), "a plain request after the fault: %+v", got)
		assert.Equal(t, wholeText("primary"), got.text)
	}
	// servedBy asserts the caller got the whole answer of the seat named
	// seat, and the provider saw p requests of the class on the primary
	// and f on the fallback.
	servedBy := func(t *testing.T, got caught, fault, seat string, p, f int) {
		t.Helper()
		assert.True(t, got.whole(), "the caller gets the whole answer: %+v", got)
		assert.Equal(t, wholeText(seat), got.text, "no truncated or mixed answer")
		assert.Len(t, primary.saw(fault), p, "the primary saw the attempts the policy allows")
		assert.Len(t, fallback.saw(fault), f, "the fallback saw the attempts the policy allows")
	}
	// cut asserts the caller's stream was cut after words words: its
	// headers came, its body broke off (never a clean end), no finish.
	cut := func(t *testing.T, got caught, words int) {
		t.Helper()
		assert.Equal(t, 200, got.status)
		assert.Error(t, got.err, "the caller's connection is cut, not ended cleanly")
		assert.Empty(t, got.finish, "no finish reason: nothing looks whole")
		assert.Equal(t, strings.Join(strings.Fields(wholeText("primary"))[:words], " ")+" ", got.text)
	}
	// unchanged asserts the caller got the provider's error as it came,
	// told not to retry, and the provider saw one request.
	unchanged := func(t *testing.T, got caught, fault, code string) {
		t.Helper()
		assert.Equal(t, 400, got.status)
		assert.Equal(t, errorBody("invalid_request_error", code), got.body, "the provider's error, unchanged")
		assert.Equal(t, "false", got.header.Get("X-Should-Retry"))
		assert.Len(t, primary.saw(fault), 1, "no retry")
		assert.Empty(t, fallback.saw(fault), "no failover")
	}

	t.Run("01 429 Retry-After once", func(t *testing.T) {
		got := ask(t, px.url, "f01", "01", "c01")
		servedBy(t, got, "01", "primary", 2, 0)
		g := gaps(primary.saw("01"))
		require.Len(t, g, 1)
		assert.GreaterOrEqual(t, g[0], time.Second, "the proxy waited the Retry-After")
		assert.Less(t, g[0], time.Second+slack)
		rs := px.done(t, "c01")
		assert.Equal(t, []string{"rate_limited", "ok"}, column(rs, outcomeOf))
		assert.GreaterOrEqual(t, rs[1].Delay, time.Second, "the row's delay_s is the wait")
		healthy(t)
	})
	t.Run("02 429 persistent", func(t *testing.T) {
		got := ask(t, px.url, "f02", "02", "c02")
		servedBy(t, got, "02", "fallback", 2, 1)
		for i, g := range gaps(primary.saw("02"), fallback.saw("02")) {
			assert.Less(t, g, backoff(i+1), "spaced as the backoff says (retry %d)", i+1)
		}
		healthy(t)
	})
	t.Run("03 500 once", func(t *testing.T) {
		got := ask(t, px.url, "f03", "03", "c03")
		servedBy(t, got, "03", "primary", 2, 0)
		for i, g := range gaps(primary.saw("03")) {
			assert.Less(t, g, backoff(i+1))
		}
		healthy(t)
	})
	t.Run("04 503 persistent", func(t *testing.T) {
		got := ask(t, px.url, "f04", "04", "c04")
		servedBy(t, got, "04", "fallback", 2, 1)
		for i, g := range gaps(primary.saw("04"), fallback.saw("04")) {
			assert.Less(t, g, backoff(i+1))
		}
		healthy(t)
	})
	t.Run("05 reset before headers", func(t *testing.T) {
		got := ask(t, px.url, "f05", "05", "c05")
		servedBy(t, got, "05", "primary", 2, 0)
		healthy(t)
	})
	t.Run("06 no answer at all", func(t *testing.T) {
		got := ask(t, px.url, "f06", "06", "c06")
		servedBy(t, got, "06", "fallback", 1, 1)
		g := gaps(primary.saw("06"), fallback.saw("06"))
		require.Len(t, g, 1)
		assert.GreaterOrEqual(t, g[0], pol.Budget.MaxWait, "cut at the wait cap, a first-token deadline")
		assert.Less(t, g[0], pol.Budget.MaxWait+backoff(1))
		healthy(t)
	})
	t.Run("07 first token late", func(t *testing.T) {
		got := ask(t, px.url, "f07", "07", "c07")
		servedBy(t, got, "07", "fallback", 1, 1)
		rs := px.done(t, "c07")
		require.NotEmpty(t, rs)
		assert.Equal(t, admit.WaitCap, rs[0].Outcome, "the role-only chunk is no first token")
		assert.Equal(t, "refuse: queue wait", rs[0].Decision)
		healthy(t)
	})
	t.Run("08 malformed event mid-stream", func(t *testing.T) {
		got := ask(t, px.url, "f08", "08", "c08")
		servedBy(t, got, "08", "primary", 1, 0)
		assert.Empty(t, got.bad, "the event no reader parses is dropped")
		rs := px.done(t, "c08")
		require.Len(t, rs, 1)
		assert.Equal(t, admit.OK, rs[0].Outcome)
		assert.Contains(t, rs[0].Note, "1 malformed stream events dropped")
		healthy(t)
	})
	t.Run("09 complete stream without [DONE]", func(t *testing.T) {
		got := ask(t, px.url, "f09", "09", "c09")
		servedBy(t, got, "09", "primary", 1, 0)
		assert.False(t, got.done)
		healthy(t)
	})
	t.Run("10 primary down, then back, under 20 requests", func(t *testing.T) {
		var wg sync.WaitGroup
		answers := make([]caught, 20)
		began := time.Now()
		for i := range answers {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 130 * ms) // the requests' pacing, not a clock
				answers[i] = ask(t, px.url, "f10", "10", fmt.Sprintf("c10-%02d", i))
			})
		}
		wg.Wait()
		for i, got := range answers {
			assert.True(t, got.whole(), "request %d is served: %+v", i, got)
		}
		for i, got := range answers[17:] {
			assert.Equal(t, wholeText("primary"), got.text, "request %d: traffic returned to the primary after the outage", 17+i)
		}
		// The breaker keeps the primary's load down while it is open: no
		// request past the first few, and each probe, reaches it during
		// the outage.
		during := 0
		for _, a := range primary.saw("10") {
			if a.at.Sub(began) < primary.outage {
				during++
			}
		}
		assert.Less(t, during, 12, "the open breaker spared the primary")
		healthy(t)
	})
	t.Run("11 failed over: the fallback's model and usage, no failed attempt billed", func(t *testing.T) {
		got := ask(t, px.url, "f11", "11", "c11")
		servedBy(t, got, "11", "fallback", 2, 1)
		assert.Equal(t, "fallback-model", got.model)
		require.NotNil(t, got.usage)
		assert.Equal(t, int64(hostileWords), got.usage.Completion)
		rs := px.done(t, "c11")
		require.Len(t, rs, 3)
		for _, r := range rs[:2] {
			assert.Equal(t, admit.Free, r.Billing)
			assert.Zero(t, r.CostUSD, "a failed attempt is not billed")
		}
		assert.Equal(t, "fallback", rs[2].Seat)
		assert.Equal(t, "fallback-model", rs[2].Model)
		assert.Equal(t, int64(12+hostileWords), rs[2].Tokens)
		assert.Positive(t, rs[2].CostUSD)
		healthy(t)
	})
	t.Run("12 content filter", func(t *testing.T) {
		unchanged(t, ask(t, px.url, "f12", "12", "c12"), "12", "content_filter")
		assert.Equal(t, []string{"client_error", "refuse: permanent error"}, column(px.done(t, "c12"), outcomeOf))
		healthy(t)
	})
	t.Run("13 context length", func(t *testing.T) {
		// Not retried on the seat that said it, and not back: once, at
		// once, to the seat of the chain with a larger window.
		got := ask(t, px.url, "f13", "13", "c13")
		assert.True(t, got.whole(), "the caller gets the larger seat's whole answer: %+v", got)
		assert.Equal(t, wholeText("spare"), got.text)
		assert.Len(t, primary.saw("13"), 1, "never retried on the seat whose window was too small")
		assert.Len(t, spare.saw("13"), 1)
		rs := px.done(t, "c13")
		require.Len(t, rs, 2, px.rows.text())
		assert.Equal(t, []string{"primary", "spare"}, column(rs, func(r ledgerfile.Row) string { return r.Seat }))
		assert.Equal(t, admit.ClientError, rs[0].Outcome)
		assert.Equal(t, admit.OK, rs[1].Outcome)
		assert.Contains(t, rs[1].Note, "after context length on primary", "the row names both attempts")
		healthy(t)
	})
	// continued asserts the caller got one whole answer: the primary's
	// first words words, then the spare's, under the first chunk's id and
	// model, with one role chunk, one finish reason, one usage that adds
	// up the rows, one [DONE]; and the job's rows are the cut attempt
	// (outcome) and the continuation, on the spare.
	continued := func(t *testing.T, got caught, fault, job string, words int, outcome admit.Outcome) {
		t.Helper()
		assert.True(t, got.whole(), "the caller gets the whole answer: %+v", got)
		want := strings.Fields(wholeText("primary"))[:words]
		want = append(want, strings.Fields(wholeText("spare"))[words:]...)
		assert.Equal(t, strings.Join(want, " ")+" ", got.text, "the cut answer, continued where it was cut")
		assert.Equal(t, 1, got.finishes, "one finish reason")
		assert.Equal(t, 1, got.usages, "one usage")
		assert.Equal(t, 1, got.dones, "one [DONE]")
		assert.Equal(t, 1, got.roles, "one role chunk: the continuation's preamble is not sent")
		assert.Len(t, got.ids, 1, "one id: the first chunk's")
		assert.NotEqual(t, "spare-model", got.model, "the first chunk's model")
		assert.Len(t, primary.saw(fault), 1)
		assert.Empty(t, fallback.saw(fault), "the fallback takes no prefill: never sent one")
		assert.Len(t, spare.saw(fault), 1, "continued on the seat that takes a prefill")
		rs := px.done(t, job)
		require.Len(t, rs, 2, px.rows.text())
		assert.Equal(t, outcome, rs[0].Outcome, "the row says the stream was cut")
		assert.Equal(t, "primary", rs[0].Seat)
		assert.Equal(t, admit.OK, rs[1].Outcome)
		assert.Equal(t, "spare", rs[1].Seat)
		require.NotNil(t, got.usage)
		assert.Equal(t, rs[0].PromptTokens+rs[1].PromptTokens, got.usage.Prompt, "the usage adds up both rows: the continuation's input is input")
		assert.Equal(t, rs[0].CompletionTokens+rs[1].CompletionTokens, got.usage.Completion)
		assert.Positive(t, rs[1].CostUSD, "the continuation is billed")
	}
	t.Run("14 cut after 40 of 60 tokens", func(t *testing.T) {
		continued(t, ask(t, px.url, "f14", "14", "c14"), "14", "c14", 40, admit.Reset)
		healthy(t)
	})
	t.Run("14 cut after 40 of 60 tokens, the body ending cleanly", func(t *testing.T) {
		// No finish reason, no [DONE]: a stream is whole only when it
		// says so, so this one is a cut too, never a short success.
		continued(t, ask(t, px.url, "f14", "14c", "c14c"), "14c", "c14c", 40, admit.Reset)
		healthy(t)
	})
	t.Run("15 stall after 20 tokens", func(t *testing.T) {
		continued(t, ask(t, px.url, "f15", "15", "c15"), "15", "c15", 20, admit.Reset)
		rs := px.done(t, "c15")
		require.NotEmpty(t, rs)
		assert.Contains(t, rs[0].Note, "stalled", "by the stall window, not the hard timeout")
		healthy(t)
	})
	t.Run("16 cut, and the fallback takes no prefill", func(t *testing.T) {
		continued(t, ask(t, px.url, "f16", "16", "c16"), "16", "c16", 40, admit.Reset)
		healthy(t)
	})
	t.Run("a cut stream of a chain with no prefill seat is cut", func(t *testing.T) {
		got := ask(t, px.url, "g14", "14", "c14n")
		cut(t, got, 40)
		assert.Len(t, spare.saw("14"), 1, "only the f14 request was continued")
		rs := px.done(t, "c14n")
		require.Len(t, rs, 1)
		assert.Equal(t, admit.Reset, rs[0].Outcome)
		healthy(t)
	})
	t.Run("a cut stream whose only prefill seat refuses the prefill is cut, never given its 400", func(t *testing.T) {
		got := ask(t, px.url, "h14", "14", "c14l")
		cut(t, got, 40)
		assert.Empty(t, got.bad)
		assert.NotContains(t, got.text, "prefill_not_supported")
		assert.Len(t, liar.saw("14"), 1, "the continuation was sent, and refused")
		rs := px.done(t, "c14l")
		assert.Equal(t, []string{"reset", "client_error", "refuse: permanent error"}, column(rs, outcomeOf))
		healthy(t)
	})
	px.stop()
	rs := px.rows.all()
	assertReplaysUnchanged(t, pol, rs, pcfg, fcfg, scfg, lcfg)
	if t.Failed() || testing.Verbose() {
		t.Logf("the log:\n%s", rowsText(rs))
	}
}
