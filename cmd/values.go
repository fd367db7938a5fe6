package cmd

import (
	"fmt"
	"strings"
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
