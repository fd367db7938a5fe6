package cmd

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cast"
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

// valueString renders a config value as the user wrote it, for parsing,
// as viper's own Get* does (spf13/cast); a mapping, a list, a date or
// nothing is not a single value.
func valueString(v any) (string, bool) {
	switch v.(type) {
	case string, bool, int, int64, uint64, float64, time.Duration:
		s, err := cast.ToStringE(v)
		return s, err == nil
	}
	return "", false
}
