// The policy from the resolved config: budget, retry rules, timeouts,
// breaker, seats and thresholds, each key checked and named on error.

package cmd

import (
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// apply sets the policy's field of every setting under section ("" for
// every section), each parsed by its kind and checked against its cap
// and, where the table says so, for a positive value.
func (c *config) apply(p *rehearse.Policy, section string) error {
	for _, s := range settings {
		if s.pol == nil || !strings.HasPrefix(s.key, section) {
			continue
		}
		v, err := c.value(s.key)
		if err != nil {
			return err
		}
		if n, ok := v.(int64); ok && s.max > 0 && n > s.max {
			return badInput("%s: %d is too large (at most %d)", c.where(s.key), n, s.max)
		}
		if s.pos && reflect.ValueOf(v).Int() <= 0 {
			return badInput("%s: must be positive", c.where(s.key))
		}
		setField(s.pol(p), v)
	}
	return nil
}

// setField stores a parsed value in the field dst points to: a count
// in an int too, and a price that defaults to another when unset (a
// *float64) as a pointer to it.
func setField(dst, v any) {
	d, val := reflect.ValueOf(dst).Elem(), reflect.ValueOf(v)
	if d.Kind() == reflect.Pointer {
		d.Set(reflect.New(val.Type()))
		d = d.Elem()
	}
	d.Set(val.Convert(d.Type()))
}

// budget resolves the budget section.
func (c *config) budget() (admit.Budget, error) {
	p := rehearse.DefaultPolicy()
	err := c.apply(&p, "budget.")
	return p.Budget, err
}

// policy resolves the whole policy and its seats. Seats named in
// fallback must exist; the first fallback seat is where jobs start.
func (c *config) policy() (rehearse.Policy, map[string]seat.Config, error) {
	p := rehearse.DefaultPolicy()
	if err := c.apply(&p, ""); err != nil {
		return p, nil, err
	}
	if err := p.Validate(); err != nil {
		key, _, _ := strings.Cut(err.Error(), ":")
		return p, nil, badInput("%s:%s", c.where(key), strings.TrimPrefix(err.Error(), key+":"))
	}
	seats, err := c.seats()
	if err != nil {
		return p, nil, err
	}
	if p.Fallback, err = c.list("fallback", c.v.Get("fallback")); err != nil {
		return p, nil, err
	}
	for i, name := range p.Fallback {
		ln := strings.ToLower(name)
		if _, ok := seats[ln]; !ok {
			err := badInput("%s[%d]: no seat named %q under seats", c.where("fallback"), i, name)
			if s, ok := admit.Closest(ln, slices.Sorted(maps.Keys(seats))); ok {
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

// seatMap is the file's seats section (seats come from the file only).
func (c *config) seatMap() map[string]any {
	m, _ := c.v.Get("seats").(map[string]any)
	return m
}

// seats resolves the seats map. A seat's kind decides which keys it needs.
func (c *config) seats() (map[string]seat.Config, error) {
	out := map[string]seat.Config{}
	for name, raw := range c.seatMap() {
		key := "seats." + name
		sc := seat.Config{Name: name}
		m, _ := raw.(map[string]any)
		for _, s := range settings {
			k, ok := strings.CutPrefix(s.key, "seats.*.")
			if !ok || m[k] == nil || s.seat == nil {
				continue
			}
			if words, ok := m[k].(string); ok && k == "command" {
				sc.Command = strings.Fields(words)
				continue
			}
			v, err := c.parse(s.kind, key+"."+k, m[k])
			if err != nil {
				return nil, err
			}
			setField(s.seat(&sc), v)
		}
		if h, ok := m["headers"].(map[string]any); ok {
			sc.Headers = map[string]string{}
			for k, v := range h {
				s, ok := valueString(v)
				if !ok {
					return nil, badInput("%s: expected a single value, got %T", c.where(key+".headers."+k), v)
				}
				sc.Headers[k] = s
			}
		}
		if sc.APIKeyEnv != "" && !envVarName().MatchString(sc.APIKeyEnv) || looksLikeKey(sc.APIKeyEnv) {
			// Never echo it: it may be the key itself.
			return nil, withHint(badInput("%s: holds something that looks like a key, not a variable name", c.where(key+".api_key_env")),
				"put the key in an environment variable and name the variable: api_key_env: OPENAI_API_KEY")
		}
		if err := seat.CheckAPI(sc.Kind, sc.API); err != nil {
			return nil, badInput("%s: %v", c.where(key+".api"), err)
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
			var err error
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
	for metric, v := range raw {
		key := "thresholds." + metric
		exprs, err := c.list(key, v)
		if err != nil {
			return nil, err
		}
		out = append(out, thresholdEntry{Metric: metric, Exprs: exprs, Where: c.where(key)})
	}
	slices.SortFunc(out, func(a, b thresholdEntry) int {
		return c.byLine("thresholds."+a.Metric, "thresholds."+b.Metric)
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
