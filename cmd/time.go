package cmd

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// TimeOptions is one timed attempt against one seat.
type TimeOptions struct {
	IO     *IOStreams
	Ctx    context.Context // Ctrl-C cancels the attempt
	Now    func() time.Time
	Getenv func(string) string

	Seat   seat.Config
	Places keyPlaces       // where its keys were written, for errors
	Policy rehearse.Policy // timeouts.soft, retry.slow_5xx_after and the defaults below

	Prompt      string
	MaxTokens   int
	HardTimeout time.Duration // default timeouts.hard
	WaitCap     time.Duration // default budget.max_wait; 0: none
	Call        int           // script seats: which call to time, 1-based
	Job         string        // sent as the Idempotency-Key
	JSON        bool
}

func newTimeCmd(f *Factory, runF func(*TimeOptions) error) *cobra.Command {
	opts := &TimeOptions{IO: f.IO, Now: f.Now, Getenv: f.Getenv}
	var seatName, promptFile string
	c := &cobra.Command{
		Use:   "time --seat NAME",
		Short: "Time one attempt against one seat",
		Long: `Send one attempt to one seat from the config and print what it measured,
so you can check a seat before rehearsing on it.

The fields:
  connect_s     the new connection's set-up ("-" when a kept-alive one
                was reused; seats.NAME.cold: true opens one every time)
  ttfb_s        submit → response headers
  wait_s        submit → first chunk carrying content (role-only and empty
                chunks, and bare headers, do not count); cut off before
                one, at least the elapsed, as the log writes it
  elapsed_s     submit → last byte (or the cancellation)
  prompt_tokens, completion_tokens, tokens_from
                from the response's usage field, or counted with a
                tokenizer when it has none (seats.NAME.tokenizer: server
                asks the server's), or an estimate for an attempt that was
                cut ("script" for script seats); mixed names each count's
                source in prompt_tokens_from and completion_tokens_from
  cached_tokens, cache_write_tokens, reasoning_tokens
                the parts of the counts the provider reported (input read
                from and written to its prompt cache, reasoning inside the
                completion); shown only when reported
  http_status, retry_after_s, error_code, bytes
  outcome       ok, conn_error, rate_limited, client_error, server_error,
                timeout, wait_cap, reset or cancelled
  billing       billable, free or ambiguous

The hard timeout (--hard-timeout, default timeouts.hard) and the wait cap
(--wait-cap, default budget.max_wait; 0 for none) cancel the request for
real. Passing timeouts.soft prints "still waiting" on stderr. A script
seat is resolved on the virtual clock: no time passes and the numbers are
the same every run (--call N picks its N-th call).

The prompt (--prompt, --prompt-file, or a throwaway default) is sent and
never printed or logged. A failed attempt is data, not an error: it
prints and exits 0.` + exitStatus("the attempt ran, whatever its outcome", "not used"),
		Example: `  # a seat from retrygate.yaml
  retrygate time --seat scratch

  # the free-seat demo's second attempt, on the virtual clock
  retrygate time --seat demo --call 2 --json

  # against a local seat server (seat served: base_url http://127.0.0.1:6556/v1)
  retrygate seat serve --script builtin:free-seat --addr 127.0.0.1:6556 &
  retrygate time --seat served --hard-timeout 10s --wait-cap 5s`,
		Args: cobra.NoArgs,
		RunE: runE(opts, func(c *cobra.Command, _ []string) error { return opts.fill(f, c, seatName, promptFile) }, runF, runTime),
	}
	fl := c.Flags()
	fl.StringVar(&seatName, "seat", "", "the `name` of a seat under seats: in the config")
	fl.StringVar(&opts.Prompt, "prompt", "", "scratch prompt `text` (never printed or logged)")
	fl.StringVar(&promptFile, "prompt-file", "", "read the scratch prompt from `file`")
	fl.String("max-tokens", "256", "max completion `tokens` to ask for")
	fl.String("hard-timeout", "", "cancel the attempt after this `duration` (default timeouts.hard)")
	fl.String("wait-cap", "", "cancel when no content came within this `duration` (default budget.max_wait; 0: none)")
	fl.String("call", "1", "script seats: time the script's `N`-th call")
	fl.StringVar(&opts.Job, "job", "", "job `id` sent as the Idempotency-Key (default time-<unix ms>)")
	fl.BoolVar(&opts.JSON, "json", false, "print JSON")
	return c
}

func (o *TimeOptions) fill(f *Factory, c *cobra.Command, seatName, promptFile string) error {
	o.Ctx = f.Ctx
	if strings.TrimSpace(seatName) == "" {
		return withHint(badInput("--seat: required"), "name a seat from the seats: map of retrygate.yaml (or --config FILE)")
	}
	o.MaxTokens, o.Call = 256, 1
	if n, set, err := flagValue(c, "max-tokens", admit.ParseCount); err != nil {
		return err
	} else if set {
		if n < 1 || n > 1<<24 {
			return badInput("--max-tokens: want 1 to %d, got %d", 1<<24, n)
		}
		o.MaxTokens = int(n)
	}
	if n, set, err := flagValue(c, "call", admit.ParseCount); err != nil {
		return err
	} else if set {
		if n < 1 || n > math.MaxInt32 {
			return badInput("--call: want 1 to %d, got %d", math.MaxInt32, n)
		}
		o.Call = int(n)
	}
	var err error
	if o.Prompt, err = scratchPrompt(c, o.Prompt, promptFile); err != nil {
		return err
	}
	if strings.ContainsAny(o.Job, "\r\n") {
		return badInput("--job: must be one line (it is sent as the Idempotency-Key header)")
	}

	cfg, err := loadConfig(f, c, nil)
	if err != nil {
		return err
	}
	p, seats, err := cfg.policy()
	if err != nil {
		return err
	}
	o.Policy = p
	sc, err := cfg.seatNamed(seats, seatName)
	if err != nil {
		return err
	}
	o.Seat = sc
	if c.Flags().Changed("call") && sc.Kind != "script" {
		return badInput("--call: only for script seats; seat %q is kind %s", sc.Name, sc.Kind)
	}

	o.HardTimeout, o.WaitCap = p.Timeouts.Hard, p.Budget.MaxWait // the policy's hard timeout is positive
	if err := cmp.Or(
		flagInto(c, "hard-timeout", admit.ParseDuration, &o.HardTimeout),
		flagInto(c, "wait-cap", admit.ParseDuration, &o.WaitCap),
	); err != nil {
		return err
	}
	if o.HardTimeout <= 0 {
		return badInput("--hard-timeout: must be positive")
	}
	if o.Job == "" {
		o.Job = "time-" + strconv.FormatInt(f.Now().UnixMilli(), 10)
	}
	o.Places = cfg.places([]seat.Config{sc})
	return nil
}

func runTime(o *TimeOptions) error {
	var obs seat.Observation
	clock := "real"
	sc := o.Seat
	spec, err := openSeat(&sc, seat.Options{Getenv: o.Getenv, Now: o.Now}, o.Places)
	if err != nil {
		return err
	}
	if spec.Planner != nil {
		// The virtual-time stopwatch: what a client with these limits
		// would observe of the script's call, without waiting for it.
		obs = seat.Resolve(spec.Planner.PlanFor(o.Call-1), o.HardTimeout, o.WaitCap, o.Policy.Retry.SlowServerAfter)
		clock = "virtual"
	} else {
		parent := o.Ctx
		if parent == nil {
			parent = context.Background()
		}
		ctx, cancel := context.WithTimeout(parent, o.HardTimeout)
		defer cancel()
		req := seat.Request{
			Prompt: o.Prompt, MaxTokens: o.MaxTokens, IdempotencyKey: o.Job,
			WaitCap: o.WaitCap, Slow5xxAfter: o.Policy.Retry.SlowServerAfter,
		}
		if soft := o.Policy.Timeouts.Soft; soft > 0 && soft < o.HardTimeout {
			req.SoftTimeout = soft
			req.OnSoft = func(elapsed time.Duration) {
				fmt.Fprintln(o.IO.ErrOut, "retrygate: "+stillWaiting(o.Job, sc.Name, elapsed, soft))
			}
		}
		obs = spec.Seat.Do(ctx, req)
	}
	obs.Seat = sc.Name
	if obs.Model == "" {
		obs.Model = sc.Model
	}
	t := newTimeJSON(obs, sc, clock, o)
	if o.JSON {
		err = printJSON(o.IO.Out, t)
	} else {
		err = printTable(o.IO, []string{"field", "value"}, t.rows())
	}
	if err != nil {
		return err
	}
	// A wrong port or a wrong key is said as rehearse says it, after the
	// attempt's figures.
	var tally seatTally
	tally.add(sc.Name, obs.Outcome, obs.HTTPStatus)
	tally.warn(o.IO.ErrOut, []seat.Config{sc})
	return nil
}

// timeJSON is the --json shape; the names are rehearsal.log's keys.
// Times that did not happen (no headers, no content) are null.
type timeJSON struct {
	Seat             string        `json:"seat"`
	Kind             string        `json:"kind"`
	Model            string        `json:"model,omitempty"`
	Clock            string        `json:"clock"` // real, or virtual for script seats
	Job              string        `json:"job,omitempty"`
	Outcome          admit.Outcome `json:"outcome"`
	Billing          admit.Billing `json:"billing"`
	HTTPStatus       *int          `json:"http_status"`
	TTFBS            *float64      `json:"ttfb_s"`
	ConnectS         *float64      `json:"connect_s,omitempty"` // absent: a kept-alive connection was reused, or a script seat
	WaitS            *float64      `json:"wait_s"`
	ElapsedS         float64       `json:"elapsed_s"`
	PromptTokens     int64         `json:"prompt_tokens"`
	CompletionTokens int64         `json:"completion_tokens"`
	Tokens           int64         `json:"tokens"`
	TokensFrom       string        `json:"tokens_from,omitempty"`
	PromptFrom       string        `json:"prompt_tokens_from,omitempty"`
	CompletionFrom   string        `json:"completion_tokens_from,omitempty"`
	// The parts the provider reported; absent when it did not.
	CachedTokens     *int64   `json:"cached_tokens,omitempty"`
	CacheWriteTokens *int64   `json:"cache_write_tokens,omitempty"`
	ReasoningTokens  *int64   `json:"reasoning_tokens,omitempty"`
	RetryAfterS      *float64 `json:"retry_after_s"`
	ErrorCode        string   `json:"error_code,omitempty"`
	Bytes            int64    `json:"bytes"`
	CostUSD          *float64 `json:"cost_usd,omitempty"`
	Note             string   `json:"note,omitempty"`
	HardTimeoutS     float64  `json:"hard_timeout_s"`
	WaitCapS         *float64 `json:"wait_cap_s"` // null: no cap
}

// seconds is d as the log writes it (3 decimals, one formatter).
func seconds(d time.Duration) float64 {
	f, _ := strconv.ParseFloat(ledgerfile.FormatSeconds(d), 64)
	return f
}

func secondsPtr(d time.Duration, ok bool) *float64 {
	if !ok {
		return nil
	}
	s := seconds(d)
	return &s
}

func newTimeJSON(obs seat.Observation, sc seat.Config, clock string, o *TimeOptions) timeJSON {
	t := timeJSON{
		Seat: obs.Seat, Kind: sc.Kind, Model: obs.Model, Clock: clock, Outcome: obs.Outcome, Billing: obs.Billing,
		TTFBS: secondsPtr(obs.TTFB, obs.HasTTFB), ConnectS: secondsPtr(obs.Connect, obs.HasConnect),
		WaitS: secondsPtr(obs.LoggedWait()), ElapsedS: seconds(obs.Elapsed),
		PromptTokens: obs.PromptTokens, CompletionTokens: obs.CompletionTokens, Tokens: obs.Tokens(), TokensFrom: obs.TokensFrom,
		RetryAfterS: secondsPtr(obs.RetryAfter, obs.HasRetryAfter), ErrorCode: obs.ErrorCode, Bytes: obs.Bytes,
		Note: obs.Detail, HardTimeoutS: seconds(o.HardTimeout), WaitCapS: secondsPtr(o.WaitCap, o.WaitCap > 0),
	}
	if clock == "real" {
		t.Job = o.Job
	}
	t.PromptFrom, t.CompletionFrom = obs.PromptFrom, obs.CompletionFrom
	t.CachedTokens = countPtr(obs.CachedTokens, obs.HasCached)
	t.CacheWriteTokens = countPtr(obs.CacheWriteTokens, obs.HasCacheWrite)
	t.ReasoningTokens = countPtr(obs.ReasoningTokens, obs.HasReasoning)
	if obs.HTTPStatus != 0 {
		st := obs.HTTPStatus
		t.HTTPStatus = &st
	}
	if usd, ok := sc.Cost(obs.Usage()); ok {
		t.CostUSD = &usd
	}
	return t
}

// countPtr is n when reported, else nil (left out of --json).
func countPtr(n int64, ok bool) *int64 {
	if !ok {
		return nil
	}
	return &n
}

// countString is a reported count's text; "" when not reported (the
// table leaves its row out, as the log leaves its key out).
func countString(p *int64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatInt(*p, 10)
}

// rows is the table: one field per line, in the log's key names, "-" for
// what did not happen.
func (t timeJSON) rows() [][]string {
	secs := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatFloat(*p, 'f', 3, 64)
	}
	status := "-"
	if t.HTTPStatus != nil {
		status = strconv.Itoa(*t.HTTPStatus)
	}
	rows := [][]string{
		{"seat", t.Seat},
		{"kind", t.Kind},
		{"model", orDash(t.Model)},
		{"clock", t.Clock},
		{"outcome", string(t.Outcome)},
		{"billing", string(t.Billing)},
		{"http_status", status},
	}
	if t.Clock == "real" {
		rows = append(rows, []string{"connect_s", secs(t.ConnectS)})
	}
	rows = append(rows, [][]string{
		{"ttfb_s", secs(t.TTFBS)},
		{"wait_s", secs(t.WaitS)},
		{"elapsed_s", secs(&t.ElapsedS)},
		{"prompt_tokens", strconv.FormatInt(t.PromptTokens, 10)},
		{"completion_tokens", strconv.FormatInt(t.CompletionTokens, 10)},
		{"tokens_from", orDash(t.TokensFrom)},
	}...)
	for _, p := range []struct {
		key string
		v   string
	}{
		{"prompt_tokens_from", t.PromptFrom}, {"completion_tokens_from", t.CompletionFrom},
		{"cached_tokens", countString(t.CachedTokens)}, {"cache_write_tokens", countString(t.CacheWriteTokens)},
		{"reasoning_tokens", countString(t.ReasoningTokens)},
	} {
		if p.v != "" {
			rows = append(rows, []string{p.key, p.v})
		}
	}
	rows = append(rows, [][]string{
		{"retry_after_s", secs(t.RetryAfterS)},
		{"error_code", orDash(t.ErrorCode)},
		{"bytes", strconv.FormatInt(t.Bytes, 10)},
	}...)
	if t.CostUSD != nil {
		rows = append(rows, []string{"cost_usd", strconv.FormatFloat(*t.CostUSD, 'f', 6, 64)})
	}
	rows = append(rows,
		[]string{"hard_timeout_s", secs(&t.HardTimeoutS)},
		[]string{"wait_cap_s", secs(t.WaitCapS)},
	)
	if t.Job != "" {
		rows = append(rows, []string{"job", t.Job})
	}
	if t.Note != "" {
		rows = append(rows, []string{"note", t.Note})
	}
	return rows
}
