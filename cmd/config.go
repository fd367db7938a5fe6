package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

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
	file     string      // the config file read, "" when none
	tree     *configTree // its contents, keys lowercased
	defaults map[string]any
	cmd      *cobra.Command
	flags    map[string]string // dotted key → flag name
	getenv   func(string) string
}

// knownKeys are the config file's keys; '*' is a seat or metric name.
// compiled on first use: a command that reads no config pays nothing.
var knownKeys = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		regexp.MustCompile(`^budget\.(deadline|token_ceiling|max_attempts|max_wait|max_spend_usd)$`),
		regexp.MustCompile(`^retry\.(base_delay|max_delay|slow_5xx_after|honor_retry_after|timeouts_retried)$`),
		regexp.MustCompile(`^timeouts\.(soft|hard)$`),
		regexp.MustCompile(`^breaker\.(window|failure_rate|min_requests|cooldown|half_open_probes)$`),
		regexp.MustCompile(`^seats\.[^.]+\.(kind|base_url|model|api_key_env|command|script|encoding|price_in|price_out|max_tokens_param|cold)$`),
		regexp.MustCompile(`^seats\.[^.]+\.(headers|extra_body)\..+$`),
		regexp.MustCompile(`^thresholds\.[^.]+$`),
		regexp.MustCompile(`^(fallback|log)$`),
	}
})

// keyNames spells out knownKeys for suggestions ('*' stands for a name).
var keyNames = []string{
	"budget.deadline", "budget.token_ceiling", "budget.max_attempts", "budget.max_wait", "budget.max_spend_usd",
	"retry.base_delay", "retry.max_delay", "retry.slow_5xx_after", "retry.honor_retry_after", "retry.timeouts_retried",
	"timeouts.soft", "timeouts.hard",
	"breaker.window", "breaker.failure_rate", "breaker.min_requests", "breaker.cooldown", "breaker.half_open_probes",
	"seats.*.kind", "seats.*.base_url", "seats.*.model", "seats.*.api_key_env", "seats.*.command", "seats.*.script",
	"seats.*.encoding", "seats.*.price_in", "seats.*.price_out", "seats.*.max_tokens_param", "seats.*.cold",
	"seats.*.headers.*", "seats.*.extra_body.*",
	"fallback", "log", "thresholds.*",
}

var literalKey = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^seats\.[^.]+\.(api_key|apikey|key|token|authorization|secret|password)$`)
})

// loadConfig reads the config file (--config, or ./retrygate.yaml when it
// exists) and binds the given flags (dotted key → flag name). The whole
// file is checked here, before any command writes anything.
func loadConfig(f *Factory, cmd *cobra.Command, flags map[string]string) (*config, error) {
	c := &config{cmd: cmd, flags: flags, getenv: f.Getenv, tree: &configTree{root: map[string]any{}, lines: map[string]int{}}, defaults: defaults()}
	if c.getenv == nil {
		c.getenv = func(string) string { return "" }
	}
	if f.Environ != nil {
		if err := checkEnviron(f.Environ()); err != nil {
			return nil, err
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

func (c *config) readFile(ctx context.Context, path string) error {
	ext := strings.TrimPrefix(filepath.Ext(path), ".")
	switch ext {
	case "yaml", "yml", "":
		ext = "yaml"
	case "json", "toml":
	default:
		return badInput("config %q: unknown format %q (want .yaml, .json or .toml)", path, ext)
	}
	data, err := readInputFile("config", path, maxConfigBytes)
	if err != nil {
		return err
	}
	if ctx == nil {
		return c.load(path, ext, data)
	}
	// Parsing a big config takes a moment; Ctrl-C ends the wait at once.
	done := make(chan error, 1)
	go func() { done <- c.load(path, ext, data) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return &exitError{Code: ExitRefuse, Err: fmt.Errorf("interrupted while reading config %q", path)}
	}
}

// load parses a config file's bytes and checks every key in it.
func (c *config) load(path, ext string, data []byte) error {
	tree, err := parseConfig(path, ext, data)
	if err != nil {
		var kc *keyCollision
		if errors.As(err, &kc) {
			return badInput("%v", err)
		}
		return badInput("config %q: %v", path, err)
	}
	c.file, c.tree = path, tree
	for _, k := range tree.leaves() {
		if literalKey().MatchString(k) {
			return withHint(badInput("%s: a literal API key in a config file is refused", c.fileRef(k)),
				"name the environment variable that holds it instead: api_key_env: OPENAI_API_KEY")
		}
		if tree.get(k) == nil {
			if slices.Contains(sections, k) || strings.HasPrefix(k, "seats.") && strings.Count(k, ".") == 1 {
				continue // an empty section
			}
			if known(k) {
				return badInput("%s: no value", c.fileRef(k))
			}
		}
		if !known(k) {
			err := badInput("%s: unknown key", c.fileRef(k))
			if s, ok := suggestKey(k); ok {
				return withHint(err, fmt.Sprintf("did you mean %s?", s))
			}
			return err
		}
	}
	return nil
}

// sections are the config's top-level mappings.
var sections = []string{"budget", "retry", "timeouts", "breaker", "seats", "thresholds"}

func known(k string) bool {
	for _, re := range knownKeys() {
		if re.MatchString(k) {
			return true
		}
	}
	return false
}

// suggestKey finds the known key nearest a mistyped one, keeping the
// user's seat or metric name in place of '*'.
func suggestKey(k string) (string, bool) {
	parts := strings.Split(k, ".")
	cands := make([]string, 0, len(keyNames))
	for _, n := range keyNames {
		np := strings.Split(n, ".")
		if len(np) == len(parts) {
			for i, p := range np {
				if p == "*" {
					np[i] = parts[i]
				}
			}
			cands = append(cands, strings.Join(np, "."))
		}
	}
	return closest(k, cands)
}

func (c *config) fileRef(key string) string { return ref(c.file, c.tree.lines[key], key) }

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

// settingWords are the first words of a RETRYGATE_ variable that make it a
// setting (a config section, or words a user would guess). Other
// RETRYGATE_ variables (RETRYGATE_FORCE_TTY, test knobs) are not settings.
var settingWords = []string{"BUDGET", "RETRY", "TIMEOUTS", "TIMEOUT", "BREAKER", "SEATS", "SEAT",
	"FALLBACK", "THRESHOLDS", "LOG", "CONFIG", "POLICY"}

// checkEnviron refuses a RETRYGATE_ variable that looks like a setting but
// is none: a typo there would otherwise be ignored without a word.
func checkEnviron(environ []string) error {
	known := make([]string, len(envKeys))
	for i, k := range envKeys {
		known[i] = envName(k)
	}
	var bad []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(strings.ToUpper(name), "RETRYGATE_")
		if !ok || slices.Contains(known, name) {
			continue
		}
		first, _, _ := strings.Cut(rest, "_")
		_, near := closest(name, known)
		tail := false
		for _, k := range envKeys {
			_, key, _ := strings.Cut(k, ".")
			if key != "" && strings.EqualFold(rest, key) {
				tail = true
			}
		}
		if slices.Contains(settingWords, first) || near || tail {
			bad = append(bad, name)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	name := bad[0]
	err := badInput("environment variable %s: not a setting", name)
	if strings.EqualFold(name, "RETRYGATE_CONFIG") {
		return withHint(err, "name the config file with --config FILE")
	}
	if s, ok := closest(name, known); ok {
		return withHint(err, fmt.Sprintf("did you mean %s?", s))
	}
	for _, k := range envKeys {
		if _, key, _ := strings.Cut(k, "."); key != "" && strings.HasSuffix(strings.ToLower(name), "_"+key) {
			return withHint(err, fmt.Sprintf("did you mean %s?", envName(k)))
		}
	}
	return withHint(err, "settings are "+strings.Join(known, ", "))
}

func defaults() map[string]any {
	p := rehearse.DefaultPolicy()
	return map[string]any{
		"budget.deadline":          p.Budget.Deadline.String(),
		"budget.token_ceiling":     p.Budget.TokenCeiling,
		"budget.max_attempts":      p.Budget.MaxAttempts,
		"budget.max_wait":          p.Budget.MaxWait.String(),
		"budget.max_spend_usd":     0,
		"retry.base_delay":         p.Retry.BaseDelay.String(),
		"retry.max_delay":          p.Retry.MaxDelay.String(),
		"retry.slow_5xx_after":     p.Retry.SlowServerAfter.String(),
		"retry.honor_retry_after":  p.Retry.HonorRetryAfter,
		"retry.timeouts_retried":   p.Retry.TimeoutsRetried,
		"timeouts.soft":            p.Timeouts.Soft.String(),
		"timeouts.hard":            p.Timeouts.Hard.String(),
		"breaker.window":           p.Breaker.Window.String(),
		"breaker.failure_rate":     p.Breaker.FailureRate,
		"breaker.min_requests":     p.Breaker.MinRequests,
		"breaker.cooldown":         p.Breaker.Cooldown.String(),
		"breaker.half_open_probes": p.Breaker.HalfOpenProbes,
		"log":                      "rehearsal.log",
	}
}

// changedFlag is key's flag when the user gave it.
func (c *config) changedFlag(key string) (string, string, bool) {
	if name := c.flags[key]; name != "" && c.cmd != nil {
		if fl := c.cmd.Flags().Lookup(name); fl != nil && fl.Changed {
			return name, fl.Value.String(), true
		}
	}
	return "", "", false
}

// get resolves key: flag > environment > file > default.
func (c *config) get(key string) any {
	if _, v, ok := c.changedFlag(key); ok {
		return v
	}
	if slices.Contains(envKeys, key) {
		if v := c.getenv(envName(key)); v != "" {
			return v
		}
	}
	if v := c.tree.get(key); v != nil {
		return v
	}
	return c.defaults[key]
}

// where names the source of key's value for an error message: the flag,
// the environment variable, the file and line, or the default.
func (c *config) where(key string) string {
	if name, _, ok := c.changedFlag(key); ok {
		return "--" + name
	}
	if slices.Contains(envKeys, key) && c.getenv(envName(key)) != "" {
		return envName(key)
	}
	if c.tree.get(key) != nil {
		return c.fileRef(key)
	}
	return key + " (default)"
}

// isSet reports whether the user gave key anywhere (not just a default).
func (c *config) isSet(key string) bool {
	return !strings.HasSuffix(c.where(key), "(default)")
}

func (c *config) raw(key string) (string, error) {
	v := c.get(key)
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
	switch v := c.get(key).(type) {
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
		ln := strings.ToLower(name)
		if _, ok := seats[ln]; !ok {
			err := badInput("%s[%d]: no seat named %q under seats", c.where("fallback"), i, name)
			if s, ok := closest(ln, seatNames(seats)); ok {
				return p, nil, withHint(err, fmt.Sprintf("did you mean %s?", s))
			}
			return p, nil, withHint(err, seatList(seats))
		}
		if j := slices.Index(p.Fallback[:i], ln); j >= 0 {
			return p, nil, withHint(badInput("%s[%d]: seat %q is already fallback[%d]", c.where("fallback"), i, name, j),
				"a chain names each seat once; a seat is retried under the budget's max_attempts")
		}
		p.Fallback[i] = ln
	}
	if len(p.Fallback) == 0 && len(seats) == 1 {
		// A lone seat is its own chain.
		for name := range seats {
			p.Fallback = []string{name}
		}
	}
	return p, seats, nil
}

// seats resolves the seats map. A seat's kind decides which keys it needs.
func (c *config) seats() (map[string]seat.Config, error) {
	raw, _ := c.tree.get("seats").(map[string]any)
	out := map[string]seat.Config{}
	for name := range raw {
		key := "seats." + name
		sc := seat.Config{Name: name}
		get := func(k string) (string, error) {
			if c.tree.get(key+"."+k) == nil {
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
		if hv, ok := c.tree.get(key + ".headers").(map[string]any); ok {
			sc.Headers = map[string]string{}
			for k := range hv {
				if sc.Headers[k], err = c.str(key + ".headers." + k); err != nil {
					return nil, err
				}
			}
		}
		if eb, ok := c.tree.get(key + ".extra_body").(map[string]any); ok {
			sc.ExtraBody = eb
		}
		if c.tree.get(key+".cold") != nil {
			if sc.Cold, err = c.boolean(key + ".cold"); err != nil {
				return nil, err
			}
		}
		for k, dst := range map[string]*float64{"price_in": &sc.PriceIn, "price_out": &sc.PriceOut} {
			if c.tree.get(key+"."+k) != nil {
				if *dst, err = c.amount(key + "." + k); err != nil {
					return nil, err
				}
			}
		}
		if cmdv := c.tree.get(key + ".command"); cmdv != nil {
			if s, ok := cmdv.(string); ok {
				sc.Command = strings.Fields(s)
			} else if sc.Command, err = c.list(key + ".command"); err != nil {
				return nil, err
			}
		}
		if sc.APIKeyEnv != "" && !envVarName().MatchString(sc.APIKeyEnv) || looksLikeKey(sc.APIKeyEnv) {
			// Never echo it: it may be the key itself.
			return nil, withHint(badInput("%s: holds something that looks like a key, not a variable name", c.where(key+".api_key_env")),
				"put the key in an environment variable and name the variable: api_key_env: OPENAI_API_KEY")
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
			if sc.Script, err = c.scriptPath(key+".script", sc.Script); err != nil {
				return nil, err
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

// scriptPath resolves a script seat's file: relative to the config file
// that names it (a config is read from anywhere), and checked now, so that
// a missing or odd file is an error naming the config's line before any
// output is written. builtin:NAME names a built-in script.
func (c *config) scriptPath(key, path string) (string, error) {
	if strings.HasPrefix(path, "builtin:") {
		return path, nil
	}
	resolved := path
	if !filepath.IsAbs(path) && c.file != "" {
		resolved = filepath.Join(filepath.Dir(c.file), path)
	}
	if err := checkInputFile(resolved, maxScriptBytes); err != nil {
		e := badInput("%s: %q: %v", c.where(key), path, err)
		if resolved != path {
			return "", withHint(e, fmt.Sprintf("a script's path is relative to the config file: %q is %s", path, resolved))
		}
		return "", e
	}
	return resolved, nil
}

// envVarName is what an environment variable's name may be.
var envVarName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// looksLikeKey tells a pasted key from a variable's name: names are words
// joined by '_' (OPENAI_API_KEY, AZURE_KEY_2); keys are long runs of
// letters and digits (sk_live_4eC39HqLyjWDarjtT1zdp7dc, AKIAIOSFODNN7EXAMPLE).
func looksLikeKey(s string) bool {
	for _, w := range strings.Split(s, "_") {
		digits, upper, lower := 0, 0, 0
		for _, r := range w {
			switch {
			case r >= '0' && r <= '9':
				digits++
			case r >= 'A' && r <= 'Z':
				upper++
			case r >= 'a' && r <= 'z':
				lower++
			}
		}
		switch {
		case len(w) >= 20:
			return true
		case len(w) >= 10 && digits >= 3 && upper+lower > 0:
			return true
		case len(w) >= 10 && upper > 0 && lower > 0 && digits > 0:
			return true
		}
	}
	return false
}

func seatNames(seats map[string]seat.Config) []string {
	names := make([]string, 0, len(seats))
	for n := range seats {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// thresholdEntry is one metric's list of threshold expressions and where it was written.
type thresholdEntry struct {
	Metric string
	Exprs  []string
	Where  string
}

// thresholds reads the thresholds section in file order.
func (c *config) thresholds() ([]thresholdEntry, error) {
	raw, _ := c.tree.get("thresholds").(map[string]any)
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
		la, lb := c.tree.lines["thresholds."+a.Metric], c.tree.lines["thresholds."+b.Metric]
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
