// The policy from the resolved config: budget, retry rules, timeouts,
// breaker, seats and thresholds, each key checked and named on error.

package cmd

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// budget resolves the budget section.
func (c *config) budget() (admit.Budget, error) {
	r, err := c.resolve()
	if err != nil {
		return admit.Budget{}, err
	}
	return r.policy.Budget, c.keyError(r.policy.Budget.Validate())
}

// keyError names where a key a policy's Validate refused was set.
func (c *config) keyError(err error) error {
	var ke *admit.KeyError
	if errors.As(err, &ke) {
		if msg := ke.Err.Error(); strings.HasPrefix(msg, "[") {
			return badInput("%s%s", c.where(ke.Key), msg) // an element of a list key: routes[0].model
		}
		return badInput("%s: %v", c.where(ke.Key), ke.Err)
	}
	return badInputErr(err)
}

// policy resolves the whole policy and its seats. Seats named in
// fallback must exist; the first fallback seat is where jobs start.
func (c *config) policy() (rehearse.Policy, map[string]seat.Config, error) {
	r, err := c.resolve()
	if err != nil {
		return rehearse.DefaultPolicy(), nil, err
	}
	p := r.policy
	if err := p.Validate(); err != nil {
		return p, nil, c.keyError(err)
	}
	seats, err := c.seats(r.seats)
	if err != nil {
		return p, nil, err
	}
	p.Fallback = slices.Clone(r.fallback)
	for i, name := range p.Fallback {
		ln := strings.ToLower(name)
		if _, ok := seats[ln]; !ok {
			err := badInput("%s[%d]: no seat named %q under seats", c.where(rehearse.KeyFallback), i, name)
			if s, ok := admit.Closest(ln, slices.Sorted(maps.Keys(seats))); ok {
				return p, nil, withHint(err, fmt.Sprintf("did you mean %s?", s))
			}
			return p, nil, withHint(err, seatList(seats))
		}
		if j := slices.Index(p.Fallback[:i], ln); j >= 0 {
			return p, nil, withHint(badInput("%s[%d]: seat %q is already fallback[%d]", c.where(rehearse.KeyFallback), i, name, j),
				"a chain names each seat once; a seat is retried under the budget's max_attempts")
		}
		p.Fallback[i] = ln
	}
	p.Routes = slices.Clone(r.routes)
	for i := range p.Routes {
		rt := &p.Routes[i]
		rt.Fallback = slices.Clone(rt.Fallback)
		for j, name := range rt.Fallback {
			ln := strings.ToLower(name)
			if _, ok := seats[ln]; !ok {
				err := badInput("%s[%d].fallback[%d]: no seat named %q under seats", c.where(rehearse.KeyRoutes), i, j, name)
				if s, ok := admit.Closest(ln, slices.Sorted(maps.Keys(seats))); ok {
					return p, nil, withHint(err, fmt.Sprintf("did you mean %s?", s))
				}
				return p, nil, withHint(err, seatList(seats))
			}
			if k := slices.Index(rt.Fallback[:j], ln); k >= 0 {
				return p, nil, badInput("%s[%d].fallback[%d]: seat %q is already fallback[%d]", c.where(rehearse.KeyRoutes), i, j, name, k)
			}
			rt.Fallback[j] = ln
		}
	}
	if err := p.Validate(); err != nil {
		return p, nil, c.keyError(err)
	}
	if len(p.Fallback) == 0 && len(seats) == 1 {
		// A lone seat is its own chain.
		for name := range seats {
			p.Fallback = []string{name}
		}
	}
	return p, seats, nil
}

// seats checks the decoded seats: a seat's kind decides which keys it
// needs, and each is checked before any output.
func (c *config) seats(decoded map[string]seat.Config) (map[string]seat.Config, error) {
	out := map[string]seat.Config{}
	for _, name := range slices.Sorted(maps.Keys(decoded)) {
		sc := decoded[name]
		key := "seats." + name
		if sc.APIKeyEnv != "" && !envVarName().MatchString(sc.APIKeyEnv) || looksLikeKey(sc.APIKeyEnv) {
			// Never echo it: it may be the key itself.
			return nil, withHint(badInput("%s: holds something that looks like a key, not a variable name", c.where(key+".api_key_env")),
				"put the key in an environment variable and name the variable: api_key_env: OPENAI_API_KEY")
		}
		if err := seat.CheckAPI(sc.Kind, sc.API); err != nil {
			return nil, badInput("%s: %v", c.where(key+".api"), err)
		}
		if err := seat.CheckTokenizer(sc.Kind, sc.Tokenizer); err != nil {
			return nil, badInput("%s: %v", c.where(key+".tokenizer"), err)
		}
		switch sc.Kind {
		case "openai", "anthropic", "ollama":
			if sc.BaseURL == "" {
				return nil, badInput("%s: a %s seat needs base_url", c.where(key+".kind"), sc.Kind)
			}
			if _, err := seat.CheckBaseURL(sc.BaseURL); err != nil {
				return nil, badInput("%s: %v", c.where(key+".base_url"), err)
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

// keyPlaces is where each key of a chain's seats was written (file:line:
// key), for an error met only when a seat opens, at run: a key variable
// that is not set, a header's. A key the file leaves out is placed at its
// seat's line.
type keyPlaces map[string]string

func (c *config) places(chain []seat.Config) keyPlaces {
	p := keyPlaces{}
	place := func(name, key string) {
		if c.lines[key] > 0 {
			p[key] = c.where(key)
		} else {
			p[key] = ref(c.file, c.lines["seats."+name], key)
		}
	}
	for _, sc := range chain {
		for _, k := range rehearse.Keys {
			if k.SeatField != nil {
				place(sc.Name, k.Seat(sc.Name))
			}
		}
		for h := range sc.Headers {
			place(sc.Name, "seats."+sc.Name+".headers."+strings.ToLower(h))
		}
	}
	return p
}

// located is a seat's error in the one shape of a config error, where
// its key was written; any other error as it is.
func (p keyPlaces) located(err error) error {
	var ke *admit.KeyError
	if errors.As(err, &ke) && p[ke.Key] != "" {
		return badInput("%s: %v", p[ke.Key], ke.Err)
	}
	return badInputErr(err)
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
	r, err := c.resolve()
	if err != nil {
		return nil, err
	}
	var out []thresholdEntry
	for metric, exprs := range r.thresholds {
		out = append(out, thresholdEntry{Metric: metric, Exprs: exprs, Where: c.where("thresholds." + metric)})
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
	if log, err = c.str(rehearse.KeyLog); err != nil {
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
