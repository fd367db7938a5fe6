// RETRYGATE_* environment variables: one per config key, and a typo in
// a setting-like name is an error, never a silently ignored setting.

package cmd

import (
	"fmt"
	"slices"
	"strings"

	"retrygate/admit"
)

// envKeys are the settings an environment variable may set.
func envKeys() []string {
	var out []string
	for _, s := range settings {
		if s.env {
			out = append(out, s.key)
		}
	}
	return out
}

// settingWords are the first words of a RETRYGATE_ variable that make it a
// setting (a config section, or words a user would guess). Other
// RETRYGATE_ variables (RETRYGATE_FORCE_TTY, test knobs) are not settings.
var settingWords = []string{"BUDGET", "RETRY", "TIMEOUTS", "TIMEOUT", "BREAKER", "SEATS", "SEAT",
	"FALLBACK", "THRESHOLDS", "LOG", "CONFIG", "POLICY"}

// checkEnviron refuses a RETRYGATE_ variable that looks like a setting but
// is none: a typo there would otherwise be ignored without a word.
func checkEnviron(environ []string) error {
	keys := envKeys()
	known := make([]string, len(keys))
	for i, k := range keys {
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
		_, near := admit.Closest(name, known)
		tail := false
		for _, k := range keys {
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
	if s, ok := admit.Closest(name, known); ok {
		return withHint(err, fmt.Sprintf("did you mean %s?", s))
	}
	for _, k := range keys {
		if _, key, _ := strings.Cut(k, "."); key != "" && strings.HasSuffix(strings.ToLower(name), "_"+key) {
			return withHint(err, fmt.Sprintf("did you mean %s?", envName(k)))
		}
	}
	return withHint(err, "settings are "+strings.Join(known, ", "))
}
