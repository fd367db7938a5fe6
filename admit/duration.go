package admit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseDuration is retrygate's one reading of a duration from a person:
// Go syntax ("45s", "1m30s", "1500ms") or a bare decimal number of seconds
// ("45", "1.5", "2e3"). Flags, config files, scripts and latency models
// all read durations here, so one set of limits holds everywhere: at
// least 0, at most MaxDuration. Errors name the value, not the key: the
// caller knows the key, the file and the line.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty duration (want e.g. 45s, 1500ms or 45)")
	}
	if _, ok := ParseDecimal(s); ok { // the one grammar of a number (ParseNumber's)
		f, err := strconv.ParseFloat(s, 64)
		switch {
		case err != nil && !errors.Is(err, strconv.ErrRange):
			return 0, fmt.Errorf("not a duration %q (want e.g. 45s, 1500ms or 45)", s)
		case f < 0 || math.Signbit(f) && f == 0 && strings.HasPrefix(s, "-"):
			return 0, fmt.Errorf("negative duration %q", s)
		case err != nil || f > MaxDuration.Seconds():
			return 0, fmt.Errorf("duration %q is too large (at most %s)", s, MaxDuration)
		}
		return time.Duration(math.Round(f * 1e9)), nil
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && !(strings.Contains(err.Error(), "invalid duration") && durationShaped(s)):
		return 0, fmt.Errorf("not a duration %q (want e.g. 45s, 1500ms or 45)", s)
	case err != nil || d > MaxDuration: // shaped like one, but past int64 nanoseconds
		return 0, fmt.Errorf("duration %q is too large (at most %s)", s, MaxDuration)
	}
	return d, nil
}

// durationShaped reports whether s holds only what Go duration syntax
// uses (digits, points, unit letters, and at least one digit and one
// unit), so a parse failure is an overflow, not a typo such as "1.2.3".
func durationShaped(s string) bool {
	return strings.Trim(s, "0123456789.nsuµmh+") == "" && strings.ContainsAny(s, "0123456789") && strings.ContainsAny(s, "nsuµmh")
}
