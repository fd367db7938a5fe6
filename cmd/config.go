package cmd

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// DefaultConfigFile is read from the working directory when --config is not given.
const DefaultConfigFile = "retrygate.yaml"

type kind int

const (
	kDuration kind = iota
	kCount
	kAmount
	kRate
	kBool
	kText
	kList
	kMap // any keys below it (a seat's headers, extra_body)
)

// setting is one config key. The table below is the only place a key is
// declared: the file's known keys, their suggestions, defaults, the
// environment variables (RETRYGATE_<SECTION>_<KEY>) and the policy's
// fields all come from it.
type setting struct {
	key  string // dotted; '*' stands for a seat or metric name
	kind kind
	env  bool   // an environment variable sets it
	max  int64  // counts: the largest allowed (0: admit.MaxTokens)
	pos  bool   // must be positive
	flag string // the budget flag that sets it
	help string // that flag's help
	pol  func(*rehearse.Policy) any
	seat func(*seat.Config) any
	def  any // when pol gives none
}

var settings = []setting{
	{key: "budget.deadline", pos: true, flag: "deadline", kind: kDuration, env: true, help: "job `deadline`", pol: func(p *rehearse.Policy) any { return &p.Budget.Deadline }},
	{key: "budget.token_ceiling", pos: true, flag: "token-ceiling", kind: kCount, env: true, help: "prompt + completion `tokens` for the whole job", pol: func(p *rehearse.Policy) any { return &p.Budget.TokenCeiling }},
	{key: "budget.max_attempts", pos: true, flag: "max-attempts", kind: kCount, env: true, max: 1000, help: "attempt `cap`", pol: func(p *rehearse.Policy) any { return &p.Budget.MaxAttempts }},
	{key: "budget.max_wait", pos: true, flag: "max-wait", kind: kDuration, env: true, help: "queue wait `cap`, submit to first byte", pol: func(p *rehearse.Policy) any { return &p.Budget.MaxWait }},
	{key: "budget.max_spend_usd", flag: "max-spend", kind: kAmount, env: true, help: "spend ceiling in `USD`", pol: func(p *rehearse.Policy) any { return &p.Budget.MaxSpendUSD }},
	{key: "retry.base_delay", kind: kDuration, env: true, pol: func(p *rehearse.Policy) any { return &p.Retry.BaseDelay }},
	{key: "retry.max_delay", kind: kDuration, env: true, pol: func(p *rehearse.Policy) any { return &p.Retry.MaxDelay }},
	{key: "retry.slow_5xx_after", kind: kDuration, env: true, pol: func(p *rehearse.Policy) any { return &p.Retry.SlowServerAfter }},
	{key: "retry.honor_retry_after", kind: kBool, env: true, pol: func(p *rehearse.Policy) any { return &p.Retry.HonorRetryAfter }},
	{key: "retry.timeouts_retried", kind: kCount, env: true, max: 100, pol: func(p *rehearse.Policy) any { return &p.Retry.TimeoutsRetried }},
	{key: "retry.budget.ratio", kind: kRate, env: true, pol: func(p *rehearse.Policy) any { return &p.Retry.Budget.Ratio }},
	{key: "retry.budget.min_per_s", kind: kAmount, env: true, pol: func(p *rehearse.Policy) any { return &p.Retry.Budget.MinPerSecond }},
	{key: "retry.budget.window", kind: kDuration, env: true, pol: func(p *rehearse.Policy) any { return &p.Retry.Budget.Window }},
	{key: "timeouts.soft", kind: kDuration, env: true, pol: func(p *rehearse.Policy) any { return &p.Timeouts.Soft }},
	{key: "timeouts.hard", kind: kDuration, env: true, pol: func(p *rehearse.Policy) any { return &p.Timeouts.Hard }},
	{key: "breaker.window", kind: kDuration, env: true, pol: func(p *rehearse.Policy) any { return &p.Breaker.Window }},
	{key: "breaker.failure_rate", kind: kRate, env: true, pol: func(p *rehearse.Policy) any { return &p.Breaker.FailureRate }},
	{key: "breaker.min_requests", kind: kCount, env: true, max: 1 << 20, pol: func(p *rehearse.Policy) any { return &p.Breaker.MinRequests }},
	{key: "breaker.cooldown", kind: kDuration, env: true, pol: func(p *rehearse.Policy) any { return &p.Breaker.Cooldown }},
	{key: "breaker.half_open_probes", kind: kCount, env: true, max: 1 << 20, pol: func(p *rehearse.Policy) any { return &p.Breaker.HalfOpenProbes }},
	{key: "seats.*.kind", kind: kText, seat: func(c *seat.Config) any { return &c.Kind }},
	{key: "seats.*.base_url", kind: kText, seat: func(c *seat.Config) any { return &c.BaseURL }},
	{key: "seats.*.model", kind: kText, seat: func(c *seat.Config) any { return &c.Model }},
	{key: "seats.*.api_key_env", kind: kText, seat: func(c *seat.Config) any { return &c.APIKeyEnv }},
	{key: "seats.*.command", kind: kList, seat: func(c *seat.Config) any { return &c.Command }},
	{key: "seats.*.script", kind: kText, seat: func(c *seat.Config) any { return &c.Script }},
	{key: "seats.*.encoding", kind: kText, seat: func(c *seat.Config) any { return &c.Encoding }},
	{key: "seats.*.price_in", kind: kAmount, seat: func(c *seat.Config) any { return &c.PriceIn }},
	{key: "seats.*.price_out", kind: kAmount, seat: func(c *seat.Config) any { return &c.PriceOut }},
	{key: "seats.*.price_cached_in", kind: kAmount, seat: func(c *seat.Config) any { return &c.PriceCachedIn }},
	{key: "seats.*.price_cache_write", kind: kAmount, seat: func(c *seat.Config) any { return &c.PriceCacheWrite }},
	{key: "seats.*.max_tokens_param", kind: kText, seat: func(c *seat.Config) any { return &c.MaxTokensParam }},
	{key: "seats.*.cold", kind: kBool, seat: func(c *seat.Config) any { return &c.Cold }},
	{key: "seats.*.api", kind: kText, seat: func(c *seat.Config) any { return &c.API }},
	{key: "seats.*.headers", kind: kMap}, // header → value, read by seats()
	{key: "seats.*.extra_body", kind: kMap, seat: func(c *seat.Config) any { return &c.ExtraBody }},
	{key: "fallback", kind: kList},
	{key: "log", kind: kText, env: true, def: "rehearsal.log"},
	{key: "thresholds.*", kind: kList},
}

// sections are the config's top-level mappings.
var sections = []string{"budget", "retry", "timeouts", "breaker", "seats", "thresholds"}

func lookupSetting(key string) *setting {
	for i := range settings {
		if matchKey(settings[i], key) {
			return &settings[i]
		}
	}
	return nil
}

// matchKey reports whether key is s's, '*' matching one name.
func matchKey(s setting, key string) bool {
	pat, parts := strings.Split(s.key, "."), strings.Split(key, ".")
	if len(parts) < len(pat) || len(parts) > len(pat) && s.kind != kMap {
		return false
	}
	for i, p := range pat {
		if p != "*" && p != parts[i] {
			return false
		}
	}
	return true
}

func envName(key string) string {
	return "RETRYGATE_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// config resolves every setting through viper as flags > environment >
// config file > defaults, and remembers the file's lines so an error can
// name the flag, the variable, or the file and line a value came from.
type config struct {
	v     *viper.Viper
	file  string                 // the config file read, "" when none
	lines map[string]int         // dotted key (lowercase) → line in the file
	flags map[string]*pflag.Flag // dotted key → the flag bound to it
}

// newConfig is a viper with every default and environment variable of
// the table, and no file yet.
func newConfig() *config {
	v := viper.New()
	v.SetEnvPrefix("RETRYGATE")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	p := rehearse.DefaultPolicy()
	for _, s := range settings {
		if d := s.defaultValue(&p); d != nil {
			v.SetDefault(s.key, d)
		}
		if s.env {
			_ = v.BindEnv(s.key)
		}
	}
	return &config{v: v, lines: map[string]int{}, flags: map[string]*pflag.Flag{}}
}

// defaultValue is s's default: the default policy's field (valueString
// writes it as a person would), or def.
func (s setting) defaultValue(p *rehearse.Policy) any {
	if s.pol == nil {
		return s.def
	}
	return reflect.ValueOf(s.pol(p)).Elem().Interface()
}

// loadConfig reads the config file (--config, or ./retrygate.yaml when it
// exists) and binds the given flags (dotted key → flag name). The whole
// file is checked here, before any command writes anything.
func loadConfig(f *Factory, cmd *cobra.Command, flags map[string]string) (*config, error) {
	if f.Environ != nil {
		if err := checkEnviron(f.Environ()); err != nil {
			return nil, err
		}
	}
	c := newConfig()
	for key, name := range flags {
		if fl := cmd.Flags().Lookup(name); fl != nil {
			_ = c.v.BindPFlag(key, fl)
			c.flags[key] = fl
		}
	}
	path := f.ConfigFile
	explicit := path != ""
	if !explicit {
		path = DefaultConfigFile
	}
	if _, err := os.Stat(path); err == nil || explicit {
		if err := c.readFile(f.Ctx, path); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func unwrapPathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// where names the source of key's value for an error message: the flag,
// the environment variable, the file and line, or the default.
func (c *config) where(key string) string {
	if fl := c.flags[key]; fl != nil && fl.Changed {
		return "--" + fl.Name
	}
	if s := lookupSetting(key); s != nil && s.env && os.Getenv(envName(key)) != "" {
		return envName(key)
	}
	if c.v.InConfig(key) {
		return c.fileRef(key)
	}
	return key + " (default)"
}

func (c *config) fileRef(key string) string { return ref(c.file, c.lines[key], key) }

func ref(file string, line int, key string) string {
	if line > 0 {
		return fmt.Sprintf("%s:%d: %s", file, line, key)
	}
	return fmt.Sprintf("%s: %s", file, key)
}

// value is key's resolved value, parsed as its kind says.
func (c *config) value(key string) (any, error) {
	s := lookupSetting(key)
	return c.parse(s.kind, key, c.v.Get(key))
}

// parse reads one value of the given kind; errors name where it came from.
func (c *config) parse(k kind, key string, v any) (any, error) {
	var err error
	switch k {
	case kList:
		return c.list(key, v)
	case kMap:
		if m, ok := v.(map[string]any); ok || v == nil {
			return m, nil
		}
		return nil, badInput("%s: expected a mapping, got %T", c.where(key), v)
	}
	s, ok := valueString(v)
	if !ok {
		return nil, badInput("%s: expected a single value, got %T", c.where(key), v)
	}
	var out any = s
	switch k {
	case kDuration:
		out, err = admit.ParseDuration(s)
	case kCount:
		out, err = admit.ParseCount(s)
	case kAmount:
		out, err = admit.ParseAmount(s)
	case kRate:
		out, err = admit.ParseRate(s)
	case kBool:
		out, err = parseBoolValue(s)
	}
	if err != nil {
		return nil, badInput("%s: %v", c.where(key), err)
	}
	return out, nil
}

func (c *config) str(key string) (string, error) {
	v, err := c.value(key)
	s, _ := v.(string)
	return s, err
}

func (c *config) duration(key string) (time.Duration, error) {
	v, err := c.value(key)
	d, _ := v.(time.Duration)
	return d, err
}

// list reads a list of strings (a list, or one comma-separated string).
func (c *config) list(key string, v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		if strings.TrimSpace(v) == "" {
			return nil, nil
		}
		var out []string
		for _, s := range strings.Split(v, ",") {
			out = append(out, strings.TrimSpace(s))
		}
		return out, nil
	case []any:
		out := make([]string, 0, len(v))
		for i, e := range v {
			s, ok := valueString(e)
			if !ok {
				return nil, badInput("%s[%d]: expected a string, got %T", c.where(key), i, e)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, badInput("%s: expected a list, got %T", c.where(key), v)
}

// logFiles is the logs a reading command reads: its arguments, or the
// config's log (default rehearsal.log) when it has none.
func logFiles(c *config, args []string) ([]string, error) {
	if len(args) > 0 {
		return args, nil
	}
	name, err := c.str("log")
	if err != nil {
		return nil, err
	}
	return []string{name}, nil
}
