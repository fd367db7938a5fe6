// RETRYGATE_* environment variables: one per config key, and a typo in
// a setting-like name is an error, never a silently ignored setting.

package cmd

import (
	"fmt"
	"slices"
	"strings"

	"retrygate/admit"
)

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
		_, near := admit.Closest(name, known)
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
	if s, ok := admit.Closest(name, known); ok {
		return withHint(err, fmt.Sprintf("did you mean %s?", s))
	}
	for _, k := range envKeys {
		if _, key, _ := strings.Cut(k, "."); key != "" && strings.HasSuffix(strings.ToLower(name), "_"+key) {
			return withHint(err, fmt.Sprintf("did you mean %s?", envName(k)))
		}
	}
	return withHint(err, "settings are "+strings.Join(known, ", "))
}
