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
	return admit.Closest(k, cands)
}

func (c *config) fileRef(key string) string { return ref(c.file, c.tree.lines[key], key) }

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
