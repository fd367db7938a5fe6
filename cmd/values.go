package cmd

import (
	"fmt"
	"math"
	"retrygate/admit"
	"strconv"
	"strings"
	"time"
)

// parseDuration is admit.ParseDuration: one reading of a duration, one
// set of limits, for flags, env and config alike.
func parseDuration(s string) (time.Duration, error) { return admit.ParseDuration(s) }

// parseCount takes a whole, non-negative number.
func parseCount(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty count")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if f, ferr := strconv.ParseFloat(s, 64); ferr == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			n = int64(f)
		} else {
			return 0, fmt.Errorf("not a whole number %q", s)
		}
	}
	if n < 0 {
		return 0, fmt.Errorf("negative count %q", s)
	}
	if n > 1<<40 {
		return 0, fmt.Errorf("count %q is too large", s)
	}
	return n, nil
}

// parseAmount takes a finite, non-negative number (USD, rates).
func parseAmount(s string) (float64, error) {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "$"))
	if s == "" {
		return 0, fmt.Errorf("empty number")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a number %q", s)
	}
	if f < 0 {
		return 0, fmt.Errorf("negative number %q", s)
	}
	if f > 1e12 {
		return 0, fmt.Errorf("number %q is too large", s)
	}
	return f, nil
}

// parseBoolValue takes true/false (and the usual 1/0, yes/no).
func parseBoolValue(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes", "on":
		return true, nil
	case "false", "0", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("not true or false %q", s)
}

// valueString renders a config value as the user wrote it, for parsing.
func valueString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	case time.Duration:
		return x.String(), true
	}
	return "", false
}
