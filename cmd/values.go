package cmd

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

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
