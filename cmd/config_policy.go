// The policy from the resolved config: budget, retry rules, timeouts,
// breaker, seats and thresholds, each key checked and named on error.

package cmd

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"retrygate/admit"
	"retrygate/rehearse"
	"retrygate/rehearse/seat"
)

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
	s, err := c.raw("breaker.failure_rate")
	if err != nil {
		return p, nil, err
	}
	if p.Breaker.FailureRate, err = admit.ParseRate(s); err != nil {
		return p, nil, badInput("%s: %v", c.where("breaker.failure_rate"), err)
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
			if s, ok := admit.Closest(ln, seatNames(seats)); ok {
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

// runSettings is what a command that runs the policy reads from the
// resolved config: where to log, the policy and its seats, and the
// thresholds its run writes on the # policy line.
func (c *config) runSettings() (log string, p rehearse.Policy, seats map[string]seat.Config, ths []rehearse.Threshold, err error) {
	if log, err = c.str("log"); err != nil {
		return
	}
	if strings.TrimSpace(log) == "" {
		err = badInput("--log: empty path")
		return
	}
	if p, seats, err = c.policy(); err != nil {
		return
	}
	entries, err := c.thresholds()
	for _, e := range entries {
		ths = append(ths, rehearse.Threshold{Metric: e.Metric, Exprs: e.Exprs})
	}
	return
}
