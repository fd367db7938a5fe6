package rehearse

import (
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/rehearse/seat"
)

// Kind is how a policy key's value is written, and so which one parser
// reads it (admit.ParseDuration, ParseCount, ParseAmount, ParseRate).
type Kind int

const (
	Duration Kind = iota // Go syntax (45s, 1500ms) or bare seconds
	Count                // a whole decimal
	USD                  // a non-negative decimal in US dollars
	Amount               // a non-negative decimal (a ratio, a rate per second)
	Rate                 // a share of calls: 0.05 or 5%
	Bool                 // true or false
	Text                 // one string
	List                 // a list of strings, or one comma-separated string
	Words                // a command line: a list, or one string split at spaces
	Map                  // any keys below it (a seat's headers, extra_body)
	Routes               // a list of {model, fallback} (the policy's routes)
)

// The keys that are no field of a Policy or a seat, read whole.
const (
	KeyFallback   = "fallback"
	KeyRoutes     = "routes"
	KeyLog        = "log"
	KeyThresholds = "thresholds.*"
)

// Key is one key of the policy file. Keys is the one place a key is
// declared: the config file's known keys and their suggestions, the
// environment variables (RETRYGATE_<SECTION>_<KEY>), the budget flags and
// their help, the defaults, the decoding into a Policy and a seat.Config,
// and the # policy line all come from it.
type Key struct {
	Name string // dotted; '*' stands for a seat's or a metric's name
	Kind Kind
	Max  int64  // a count's largest value (0: admit.MaxTokens)
	Env  bool   // an environment variable sets it
	Flag string // the flag that sets it, for the commands that take budget flags
	Help string // that flag's help
	// Field is the Policy field the key sets, SeatField the seat's: a
	// pointer to it, so a default is read and a value stored through one
	// function. Neither for fallback, log, thresholds and headers.
	Field     func(*Policy) any
	SeatField func(*seat.Config) any
	// Logged says whether the # policy line holds the key (nil: never;
	// base URLs, commands and key variables are never written).
	Logged func(*Policy, *seat.Config) bool
}

func always(*Policy, *seat.Config) bool { return true }

var Keys = []Key{
	{Name: "budget.deadline", Kind: Duration, Env: true, Flag: "deadline", Help: "job `deadline`",
		Field: func(p *Policy) any { return &p.Budget.Deadline }, Logged: always},
	{Name: "budget.token_ceiling", Kind: Count, Env: true, Flag: "token-ceiling", Help: "prompt + completion `tokens` for the whole job",
		Field: func(p *Policy) any { return &p.Budget.TokenCeiling }, Logged: always},
	{Name: "budget.max_attempts", Kind: Count, Max: 1000, Env: true, Flag: "max-attempts", Help: "attempt `cap`",
		Field: func(p *Policy) any { return &p.Budget.MaxAttempts }, Logged: always},
	{Name: "budget.max_wait", Kind: Duration, Env: true, Flag: "max-wait", Help: "queue wait `cap`, submit to first byte",
		Field: func(p *Policy) any { return &p.Budget.MaxWait }, Logged: always},
	{Name: "budget.max_spend_usd", Kind: USD, Env: true, Flag: "max-spend", Help: "spend ceiling in `USD`",
		Field:  func(p *Policy) any { return &p.Budget.MaxSpendUSD },
		Logged: func(p *Policy, _ *seat.Config) bool { return p.Budget.HasSpendCeiling() }},
	{Name: "retry.base_delay", Kind: Duration, Env: true, Field: func(p *Policy) any { return &p.Retry.BaseDelay }, Logged: always},
	{Name: "retry.max_delay", Kind: Duration, Env: true, Field: func(p *Policy) any { return &p.Retry.MaxDelay }, Logged: always},
	{Name: "retry.slow_5xx_after", Kind: Duration, Env: true, Field: func(p *Policy) any { return &p.Retry.SlowServerAfter }, Logged: always},
	{Name: "retry.honor_retry_after", Kind: Bool, Env: true, Field: func(p *Policy) any { return &p.Retry.HonorRetryAfter }, Logged: always},
	{Name: "retry.timeouts_retried", Kind: Count, Max: 100, Env: true, Field: func(p *Policy) any { return &p.Retry.TimeoutsRetried }, Logged: always},
	{Name: "retry.budget.ratio", Kind: Rate, Env: true, Field: func(p *Policy) any { return &p.Retry.Budget.Ratio }, Logged: retryBudget},
	{Name: "retry.budget.min_per_s", Kind: Amount, Env: true, Field: func(p *Policy) any { return &p.Retry.Budget.MinPerSecond }, Logged: retryBudget},
	{Name: "retry.budget.window", Kind: Duration, Env: true, Field: func(p *Policy) any { return &p.Retry.Budget.Window }, Logged: retryBudget},
	{Name: "timeouts.soft", Kind: Duration, Env: true, Field: func(p *Policy) any { return &p.Timeouts.Soft }, Logged: always},
	{Name: "timeouts.hard", Kind: Duration, Env: true, Field: func(p *Policy) any { return &p.Timeouts.Hard }, Logged: always},
	{Name: "timeouts.stall", Kind: Duration, Env: true, Field: func(p *Policy) any { return &p.Timeouts.Stall },
		Logged: func(p *Policy, _ *seat.Config) bool { return p.Timeouts.Stall > 0 }},
	{Name: "breaker.window", Kind: Duration, Env: true, Field: func(p *Policy) any { return &p.Breaker.Window }, Logged: always},
	{Name: "breaker.failure_rate", Kind: Rate, Env: true, Field: func(p *Policy) any { return &p.Breaker.FailureRate }, Logged: always},
	{Name: "breaker.min_requests", Kind: Count, Max: 1 << 20, Env: true, Field: func(p *Policy) any { return &p.Breaker.MinRequests }, Logged: always},
	{Name: "breaker.cooldown", Kind: Duration, Env: true, Field: func(p *Policy) any { return &p.Breaker.Cooldown }, Logged: always},
	{Name: "breaker.half_open_probes", Kind: Count, Max: 1 << 20, Env: true, Field: func(p *Policy) any { return &p.Breaker.HalfOpenProbes }, Logged: always},
	{Name: KeyFallback, Kind: List},
	{Name: KeyRoutes, Kind: Routes},
	// A seat's keys; the # policy line holds its name, kind, API, model
	// and prices, in this order.
	{Name: "seats.*.kind", Kind: Text, SeatField: func(c *seat.Config) any { return &c.Kind }, Logged: always},
	{Name: "seats.*.api", Kind: Text, SeatField: func(c *seat.Config) any { return &c.API },
		Logged: func(_ *Policy, c *seat.Config) bool { return c.API != "" }}, // the wire it spoke: Chat Completions or the Responses API
	{Name: "seats.*.model", Kind: Text, SeatField: func(c *seat.Config) any { return &c.Model },
		Logged: func(_ *Policy, c *seat.Config) bool { return c.Model != "" }},
	{Name: "seats.*.price_in", Kind: USD, SeatField: func(c *seat.Config) any { return &c.PriceIn }, Logged: priced},
	{Name: "seats.*.price_out", Kind: USD, SeatField: func(c *seat.Config) any { return &c.PriceOut }, Logged: priced},
	{Name: "seats.*.price_cached_in", Kind: USD, SeatField: func(c *seat.Config) any { return &c.PriceCachedIn },
		Logged: func(_ *Policy, c *seat.Config) bool { return c.PriceCachedIn != nil }},
	{Name: "seats.*.price_cache_write", Kind: USD, SeatField: func(c *seat.Config) any { return &c.PriceCacheWrite },
		Logged: func(_ *Policy, c *seat.Config) bool { return c.PriceCacheWrite != nil }},
	{Name: "seats.*.base_url", Kind: Text, SeatField: func(c *seat.Config) any { return &c.BaseURL }},
	{Name: "seats.*.api_key_env", Kind: Text, SeatField: func(c *seat.Config) any { return &c.APIKeyEnv }},
	{Name: "seats.*.command", Kind: Words, SeatField: func(c *seat.Config) any { return &c.Command }},
	{Name: "seats.*.script", Kind: Text, SeatField: func(c *seat.Config) any { return &c.Script }},
	{Name: "seats.*.encoding", Kind: Text, SeatField: func(c *seat.Config) any { return &c.Encoding }},
	{Name: "seats.*.tokenizer", Kind: Text, SeatField: func(c *seat.Config) any { return &c.Tokenizer }},
	{Name: "seats.*.max_tokens_param", Kind: Text, SeatField: func(c *seat.Config) any { return &c.MaxTokensParam }},
	{Name: "seats.*.context_window", Kind: Count, SeatField: func(c *seat.Config) any { return &c.ContextWindow },
		Logged: func(_ *Policy, c *seat.Config) bool { return c.ContextWindow > 0 }},
	{Name: "seats.*.prefill", Kind: Bool, SeatField: func(c *seat.Config) any { return &c.Prefill },
		Logged: func(_ *Policy, c *seat.Config) bool { return c.Prefill }},
	{Name: "seats.*.cold", Kind: Bool, SeatField: func(c *seat.Config) any { return &c.Cold }},
	{Name: "seats.*.headers", Kind: Map, SeatField: func(c *seat.Config) any { return &c.Headers }},
	{Name: "seats.*.extra_body", Kind: Map, SeatField: func(c *seat.Config) any { return &c.ExtraBody }},
	{Name: KeyLog, Kind: Text, Env: true},
	{Name: KeyThresholds, Kind: List},
}

func retryBudget(p *Policy, _ *seat.Config) bool { return p.Retry.Budget.Enabled() }

func priced(_ *Policy, c *seat.Config) bool { return c.PriceIn != 0 || c.PriceOut != 0 }

// KeyNamed is the key a dotted name is (a seat's or a metric's name in
// place of '*'; any key below a Map key is that key's); nil for none.
func KeyNamed(name string) *Key {
	for i := range Keys {
		if Keys[i].Matches(name) {
			return &Keys[i]
		}
	}
	return nil
}

// Matches reports whether name is k's, '*' matching one name (a Map
// key's any key below it too). It allocates nothing: a config of 40,000
// seats asks it for every value.
func (k *Key) Matches(name string) bool {
	pat := k.Name
	for {
		p, prest, pmore := strings.Cut(pat, ".")
		n, nrest, nmore := strings.Cut(name, ".")
		switch {
		case p != "*" && p != n:
			return false
		case !pmore:
			return !nmore || k.Kind == Map || k.Kind == Routes
		case !nmore:
			return false
		}
		pat, name = prest, nrest
	}
}

// Seat is the name of a seat's key: seats.NAME.KEY for seats.*.KEY.
func (k *Key) Seat(name string) string { return strings.Replace(k.Name, "*", name, 1) }

// FormatValue writes a field's value (a pointer Field or SeatField gives)
// as the # policy line and the defaults table do: durations in Go syntax,
// numbers in plain decimals; "" for a field that holds no single value.
func FormatValue(ptr any) string {
	switch v := ptr.(type) {
	case *time.Duration:
		return v.String()
	case *int:
		return strconv.Itoa(*v)
	case *int64:
		return strconv.FormatInt(*v, 10)
	case *float64:
		return strconv.FormatFloat(*v, 'f', -1, 64)
	case **float64:
		if *v == nil {
			return ""
		}
		return FormatValue(*v)
	case *bool:
		return strconv.FormatBool(*v)
	case *string:
		return *v
	}
	return ""
}
