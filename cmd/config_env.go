// RETRYGATE_* environment variables: one per config key, and a typo in
// a setting-like name is an error, never a silently ignored setting.

package cmd

import (
	"fmt"
	"slices"
	"strings"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse"
)

// settingWords are the first words of a RETRYGATE_ variable that make it a
// setting (a config section, or words a user would guess). Other
// RETRYGATE_ variables (RETRYGATE_FORCE_TTY, test knobs) are not settings.
var settingWords = []string{"BUDGET", "RETRY", "TIMEOUTS", "TIMEOUT", "BREAKER", "SEATS", "SEAT",
	"FALLBACK", "THRESHOLDS", "LOG", "CONFIG", "POLICY"}

// checkEnviron refuses a RETRYGATE_ variable that looks like a setting but
// is none: a typo there would otherwise be ignored without a word.
func checkEnviron(environ []string) error {
	var known, tails []string // each setting's variable, and its key past the section ("" for log)
	for _, k := range rehearse.Keys {
		if k.Env {
			_, tail, _ := strings.Cut(k.Name, ".")
			known, tails = append(known, envName(k.Name)), append(tails, tail)
		}
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
		tail := slices.ContainsFunc(tails, func(k string) bool { return k != "" && strings.EqualFold(rest, k) })
		if slices.Contains(settingWords, first) || near || tail {
			bad = append(bad, name)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	name := slices.Min(bad)
	err := badInput("environment variable %s: not a setting", name)
	if strings.EqualFold(name, "RETRYGATE_CONFIG") {
		return withHint(err, "name the config file with --config FILE")
	}
	if s, ok := admit.Closest(name, known); ok {
		return withHint(err, fmt.Sprintf("did you mean %s?", s))
	}
	for i, k := range tails {
		if k != "" && strings.HasSuffix(strings.ToLower(name), "_"+k) {
			return withHint(err, fmt.Sprintf("did you mean %s?", known[i]))
		}
	}
	return withHint(err, "settings are "+strings.Join(known, ", "))
}
