package cmd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"retrygate/admit"
	"retrygate/rehearse"
	"retrygate/rehearse/seat"
)

// DefaultConfigFile is read from the working directory when --config is not given.
const DefaultConfigFile = "retrygate.yaml"

// config resolves every setting as flags > env (RETRYGATE_<SECTION>_<KEY>)
// > config file > defaults, and remembers where each value came from so an
// error can name the flag, the variable, or the file and line.
type config struct {
	v        *viper.Viper
	file     string         // the config file read, "" when none
	lines    map[string]int // dotted key → line, YAML files only
	fileKeys map[string]bool
	cmd      *cobra.Command
	flags    map[string]string // dotted key → flag name
	getenv   func(string) string
}

// knownKeys are the config file's keys; '*' is a seat or metric name.
var knownKeys = []*regexp.Regexp{
	regexp.MustCompile(`^budget\.(deadline|token_ceiling|max_attempts|max_wait|max_spend_usd)$`),
	regexp.MustCompile(`^retry\.(base_delay|max_delay|slow_5xx_after|honor_retry_after|timeouts_retried)$`),
	regexp.MustCompile(`^timeouts\.(soft|hard)$`),
	regexp.MustCompile(`^breaker\.(window|failure_rate|min_requests|cooldown|half_open_probes)$`),
	regexp.MustCompile(`^seats\.[^.]+\.(kind|base_url|model|api_key_env|command|script|encoding|price_in|price_out|max_tokens_param|cold)$`),
	regexp.MustCompile(`^seats\.[^.]+\.(headers|extra_body)\..+$`),
	regexp.MustCompile(`^thresholds\.[^.]+$`),
	regexp.MustCompile(`^(fallback|log)$`),
}

var literalKey = regexp.MustCompile(`^seats\.[^.]+\.(api_key|apikey|key|token|authorization|secret|password)$`)

// loadConfig reads the config file (--config, or ./retrygate.yaml when it
// exists) and binds the given flags (dotted key → flag name).
func loadConfig(f *Factory, cmd *cobra.Command, flags map[string]string) (*config, error) {
	c := &config{v: viper.New(), cmd: cmd, flags: flags, getenv: f.Getenv, lines: map[string]int{}, fileKeys: map[string]bool{}}
	setDefaults(c.v)
	path := f.ConfigFile
	explicit := path != ""
	if !explicit {
		path = DefaultConfigFile
	}
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return nil, badInput("config %q: is a directory", path)
		}
		if err := c.readFile(path); err != nil {
			return nil, err
		}
	} else if explicit {
		return nil, badInput("config %q: %v", path, unwrapPathErr(err))
	}
	for key, name := range flags {
		if fl := cmd.Flags().Lookup(name); fl != nil {
			_ = c.v.BindPFlag(key, fl)
		}
	}
	for _, key := range envKeys {
		_ = c.v.BindEnv(key, envName(key))
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

func (c *config) readFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return badInput("config %q: %v", path, unwrapPathErr(err))
	}
	ext := strings.TrimPrefix(filepath.Ext(path), ".")
	switch ext {
	case "yaml", "yml", "":
		ext = "yaml"
		var root yaml.Node
		if err := yaml.Unmarshal(data, &root); err != nil {
			return badInput("config %q: %v", path, err)
		}
		collectLines(&root, "", c.lines)
	case "json", "toml":
	default:
		return badInput("config %q: unknown format %q (want .yaml, .json or .toml)", path, ext)
	}
	fv := viper.New()
	fv.SetConfigType(ext)
	if err := fv.ReadConfig(strings.NewReader(string(data))); err != nil {
		return badInput("config %q: %v", path, err)
	}
	c.file = path
	keys := fv.AllKeys()
	slices.Sort(keys)
	for _, k := range keys {
		c.fileKeys[k] = true
		if literalKey.MatchString(k) {
			return withHint(badInput("%s: a literal API key in a config file is refused", c.fileRef(k)),
				"name the environment variable that holds it instead: api_key_env: OPENAI_API_KEY")
		}
		known := false
		for _, re := range knownKeys {
			if re.MatchString(k) {
				known = true
				break
			}
		}
		if !known {
			return badInput("%s: unknown key", c.fileRef(k))
		}
	}
	if err := c.v.MergeConfigMap(fv.AllSettings()); err != nil {
		return badInput("config %q: %v", path, err)
	}
	return nil
}

// collectLines maps each dotted key (lowercased, as viper keys are) to its line.
func collectLines(n *yaml.Node, prefix string, out map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			collectLines(c, prefix, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := strings.ToLower(n.Content[i].Value)
			if prefix != "" {
				k = prefix + "." + k
			}
			out[k] = n.Content[i].Line
			collectLines(n.Content[i+1], k, out)
		}
	}
}

func (c *config) fileRef(key string) string {
	if line := c.lines[key]; line > 0 {
		return fmt.Sprintf("%s:%d: %s", c.file, line, key)
	}
	return fmt.Sprintf("%s: %s", c.file, key)
}

func envName(key string) string {
	return "RETRYGATE_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// envKeys are the settings an environment variable may set.
var envKeys = []string{
	"budget.deadline", "budget.token_ceiling", "budget.max_attempts", "budget.max_wait", "budget.max_spend_usd",
	"retry.base_delay", "retry.max_delay", "retry.slow_5xx_after", "retry.honor_retry_after", "retry.timeouts_retried",
	"timeouts.soft", "timeouts.hard",
	"breaker.window", "breaker.failure_rate", "breaker.min_requests", "breaker.cooldown", "breaker.half_open_probes",
	"log",
}

func setDefaults(v *viper.Viper) {
	p := rehearse.DefaultPolicy()
	v.SetDefault("budget.deadline", p.Budget.Deadline.String())
	v.SetDefault("budget.token_ceiling", p.Budget.TokenCeiling)
	v.SetDefault("budget.max_attempts", p.Budget.MaxAttempts)
	v.SetDefault("budget.max_wait", p.Budget.MaxWait.String())
	v.SetDefault("budget.max_spend_usd", 0)
	v.SetDefault("retry.base_delay", p.Retry.BaseDelay.String())
	v.SetDefault("retry.max_delay", p.Retry.MaxDelay.String())
	v.SetDefault("retry.slow_5xx_after", p.Retry.SlowServerAfter.String())
	v.SetDefault("retry.honor_retry_after", p.Retry.HonorRetryAfter)
	v.SetDefault("retry.timeouts_retried", p.Retry.TimeoutsRetried)
	v.SetDefault("timeouts.soft", p.Timeouts.Soft.String())
	v.SetDefault("timeouts.hard", p.Timeouts.Hard.String())
	v.SetDefault("breaker.window", p.Breaker.Window.String())
	v.SetDefault("breaker.failure_rate", p.Breaker.FailureRate)
	v.SetDefault("breaker.min_requests", p.Breaker.MinRequests)
	v.SetDefault("breaker.cooldown", p.Breaker.Cooldown.String())
	v.SetDefault("breaker.half_open_probes", p.Breaker.HalfOpenProbes)
	v.SetDefault("log", "rehearsal.log")
}

// where names the source of key's value for an error message: the flag,
// the environment variable, the file and line, or the default.
func (c *config) where(key string) string {
	if name := c.flags[key]; name != "" && c.cmd != nil {
		if fl := c.cmd.Flags().Lookup(name); fl != nil && fl.Changed {
			return "--" + name
		}
	}
	if slices.Contains(envKeys, key) && c.getenv(envName(key)) != "" {
		return envName(key)
	}
	if c.fileKeys[key] {
		return c.fileRef(key)
	}
	return key + " (default)"
}

// isSet reports whether the user gave key anywhere (not just a default).
func (c *config) isSet(key string) bool {
	return !strings.HasSuffix(c.where(key), "(default)")
}

func (c *config) raw(key string) (string, error) {
	v := c.v.Get(key)
	s, ok := valueString(v)
	if !ok {
		return "", badInput("%s: expected a single value, got %T", c.where(key), v)
	}
	return s, nil
}

func (c *config) duration(key string) (time.Duration, error) {
	s, err := c.raw(key)
	if err != nil {
		return 0, err
	}
	d, err := parseDuration(s)
	if err != nil {
		return 0, badInput("%s: %v", c.where(key), err)
	}
	return d, nil
}

func (c *config) count(key string) (int64, error) {
	s, err := c.raw(key)
	if err != nil {
		return 0, err
	}
	n, err := parseCount(s)
	if err != nil {
		return 0, badInput("%s: %v", c.where(key), err)
	}
	return n, nil
}

func (c *config) amount(key string) (float64, error) {
	s, err := c.raw(key)
	if err != nil {
		return 0, err
	}
	f, err := parseAmount(s)
	if err != nil {
		return 0, badInput("%s: %v", c.where(key), err)
	}
	return f, nil
}

func (c *config) boolean(key string) (bool, error) {
	s, err := c.raw(key)
	if err != nil {
		return false, err
	}
	b, err := parseBoolValue(s)
	if err != nil {
		return false, badInput("%s: %v", c.where(key), err)
	}
	return b, nil
}

func (c *config) str(key string) (string, error) {
	s, err := c.raw(key)
	if err != nil {
		return "", err
	}
	return s, nil
}

// list reads a list of strings (a YAML list, or one comma-separated string).
func (c *config) list(key string) ([]string, error) {
	switch v := c.v.Get(key).(type) {
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
	case []string:
		return v, nil
	default:
		return nil, badInput("%s: expected a list, got %T", c.where(key), v)
	}
}

// budget resolves the budget section.
func (c *config) budget() (admit.Budget, error) {
	var b admit.Budget
	var err error
	if b.Deadline, err = c.duration("budget.deadline"); err != nil {
		return b, err
	}
	if b.TokenCeiling, err = c.count("budget.token_ceiling"); err != nil {
		return b, err
	}
	n, err := c.count("budget.max_attempts")
	if err != nil {
		return b, err
	}
	if n > 1000 {
		return b, badInput("%s: %d attempts is past any sane cap (at most 1000)", c.where("budget.max_attempts"), n)
	}
	b.MaxAttempts = int(n)
	if b.MaxWait, err = c.duration("budget.max_wait"); err != nil {
		return b, err
	}
	if b.MaxSpendUSD, err = c.amount("budget.max_spend_usd"); err != nil {
		return b, err
	}
	for key, bad := range map[string]bool{
		"budget.deadline":      b.Deadline <= 0,
		"budget.token_ceiling": b.TokenCeiling <= 0,
		"budget.max_attempts":  b.MaxAttempts <= 0,
		"budget.max_wait":      b.MaxWait <= 0,
	} {
		if bad {
			return b, badInput("%s: must be positive", c.where(key))
		}
	}
	return b, nil
}

// policy resolves the whole policy and its seats. Seats named in
// fallback must exist; the first fallback seat is where jobs start.
func (c *config) policy() (rehearse.Policy, map[string]seat.Config, error) {
	p := rehearse.DefaultPolicy()
	var err error
	if p.Budget, err = c.budget(); err != nil {
		return p, nil, err
	}
	durs := []struct {
		key string
		dst *time.Duration
	}{
		{"retry.base_delay", &p.Retry.BaseDelay}, {"retry.max_delay", &p.Retry.MaxDelay},
		{"retry.slow_5xx_after", &p.Retry.SlowServerAfter},
		{"timeouts.soft", &p.Timeouts.Soft}, {"timeouts.hard", &p.Timeouts.Hard},
		{"breaker.window", &p.Breaker.Window}, {"breaker.cooldown", &p.Breaker.Cooldown},
	}
	for _, d := range durs {
		if *d.dst, err = c.duration(d.key); err != nil {
			return p, nil, err
		}
	}
	if p.Retry.HonorRetryAfter, err = c.boolean("retry.honor_retry_after"); err != nil {
		return p, nil, err
	}
	ints := []struct {
		key string
		dst *int
		max int64
	}{
		{"retry.timeouts_retried", &p.Retry.TimeoutsRetried, 100},
		{"breaker.min_requests", &p.Breaker.MinRequests, 1 << 20},
		{"breaker.half_open_probes", &p.Breaker.HalfOpenProbes, 1 << 20},
	}
	for _, i := range ints {
		n, err := c.count(i.key)
		if err != nil {
			return p, nil, err
		}
		if n > i.max {
			return p, nil, badInput("%s: %d is too large (at most %d)", c.where(i.key), n, i.max)
		}
		*i.dst = int(n)
	}
	if p.Breaker.FailureRate, err = c.amount("breaker.failure_rate"); err != nil {
		return p, nil, err
	}
	if p.Breaker.FailureRate > 1 {
		return p, nil, badInput("%s: must be between 0 and 1, got %g", c.where("breaker.failure_rate"), p.Breaker.FailureRate)
	}
	if err := p.Validate(); err != nil {
		key, _, _ := strings.Cut(err.Error(), ":")
		return p, nil, badInput("%s:%s", c.where(key), strings.TrimPrefix(err.Error(), key+":"))
	}
	seats, err := c.seats()
	if err != nil {
		return p, nil, err
	}
	if p.Fallback, err = c.list("fallback"); err != nil {
		return p, nil, err
	}
	for i, name := range p.Fallback {
		if _, ok := seats[strings.ToLower(name)]; !ok {
			return p, nil, badInput("%s[%d]: no seat named %q under seats", c.where("fallback"), i, name)
		}
		p.Fallback[i] = strings.ToLower(name)
	}
	return p, seats, nil
}

// seats resolves the seats map. A seat's kind decides which keys it needs.
func (c *config) seats() (map[string]seat.Config, error) {
	raw, _ := c.v.Get("seats").(map[string]any)
	out := map[string]seat.Config{}
	for name := range raw {
		key := "seats." + name
		sc := seat.Config{Name: name}
		get := func(k string) (string, error) {
			if c.v.Get(key+"."+k) == nil {
				return "", nil
			}
			return c.str(key + "." + k)
		}
		var err error
		if sc.Kind, err = get("kind"); err != nil {
			return nil, err
		}
		if sc.BaseURL, err = get("base_url"); err != nil {
			return nil, err
		}
		if sc.Model, err = get("model"); err != nil {
			return nil, err
		}
		if sc.APIKeyEnv, err = get("api_key_env"); err != nil {
			return nil, err
		}
		if sc.Script, err = get("script"); err != nil {
			return nil, err
		}
		if sc.Encoding, err = get("encoding"); err != nil {
			return nil, err
		}
		if sc.MaxTokensParam, err = get("max_tokens_param"); err != nil {
			return nil, err
		}
		if hv, ok := c.v.Get(key + ".headers").(map[string]any); ok {
			sc.Headers = map[string]string{}
			for k := range hv {
				if sc.Headers[k], err = c.str(key + ".headers." + k); err != nil {
					return nil, err
				}
			}
		}
		if eb, ok := c.v.Get(key + ".extra_body").(map[string]any); ok {
			sc.ExtraBody = eb
		}
		if c.v.Get(key+".cold") != nil {
			if sc.Cold, err = c.boolean(key + ".cold"); err != nil {
				return nil, err
			}
		}
		for k, dst := range map[string]*float64{"price_in": &sc.PriceIn, "price_out": &sc.PriceOut} {
			if c.v.Get(key+"."+k) != nil {
				if *dst, err = c.amount(key + "." + k); err != nil {
					return nil, err
				}
			}
		}
		if cmdv := c.v.Get(key + ".command"); cmdv != nil {
			if s, ok := cmdv.(string); ok {
				sc.Command = strings.Fields(s)
			} else if sc.Command, err = c.list(key + ".command"); err != nil {
				return nil, err
			}
		}
		switch sc.Kind {
		case "openai", "anthropic", "ollama":
			if sc.BaseURL == "" {
				return nil, badInput("%s: a %s seat needs base_url", c.where(key+".kind"), sc.Kind)
			}
		case "exec":
			if len(sc.Command) == 0 {
				return nil, badInput("%s: an exec seat needs command", c.where(key+".kind"))
			}
		case "script":
			if sc.Script == "" {
				return nil, badInput("%s: a script seat needs script", c.where(key+".kind"))
			}
			if !filepath.IsAbs(sc.Script) && c.file != "" && !strings.HasPrefix(sc.Script, "builtin:") {
				// Scripts are found relative to the config file, as a reader expects.
				if _, err := os.Stat(sc.Script); err != nil {
					sc.Script = filepath.Join(filepath.Dir(c.file), sc.Script)
				}
			}
		case "":
			return nil, badInput("%s: missing kind (want openai, anthropic, ollama, exec or script)", c.fileRef(key))
		default:
			return nil, badInput("%s: unknown seat kind %q (want openai, anthropic, ollama, exec or script)", c.where(key+".kind"), sc.Kind)
		}
		out[name] = sc
	}
	return out, nil
}

// thresholdEntry is one metric's list of threshold expressions and where it was written.
type thresholdEntry struct {
	Metric string
	Exprs  []string
	Where  string
}

// thresholds reads the thresholds section in file order.
func (c *config) thresholds() ([]thresholdEntry, error) {
	raw, _ := c.v.Get("thresholds").(map[string]any)
	var out []thresholdEntry
	for metric := range raw {
		key := "thresholds." + metric
		exprs, err := c.list(key)
		if err != nil {
			return nil, err
		}
		out = append(out, thresholdEntry{Metric: metric, Exprs: exprs, Where: c.where(key)})
	}
	slices.SortFunc(out, func(a, b thresholdEntry) int {
		la, lb := c.lines["thresholds."+a.Metric], c.lines["thresholds."+b.Metric]
		if la != lb {
			return la - lb
		}
		return strings.Compare(a.Metric, b.Metric)
	})
	return out, nil
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
