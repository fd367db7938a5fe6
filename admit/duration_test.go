package admit

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestParseDuration(t *testing.T) {
	ok := map[string]time.Duration{
		"45s": 45 * time.Second, "1m30s": 90 * time.Second, "1500ms": 1500 * time.Millisecond,
		"45": 45 * time.Second, "1.5": 1500 * time.Millisecond, " 2e3 ": 2000 * time.Second, "0": 0,
		"1000000000": MaxDuration,
	}
	for in, want := range ok {
		got, err := ParseDuration(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	bad := map[string]string{
		"": "empty", "-1": "negative", "-1s": "negative", "abc": "not a duration", "0x10": "not a duration",
		"nan": "not a duration", "inf": "not a duration", "1_0": "not a duration", "1e": "not a duration",
		"1000000001": "too large", "1e400": "too large", "300000h": "too large", "99999999999999h": "too large",
	}
	for in, want := range bad {
		_, err := ParseDuration(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), want, in)
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"45s", "1.5", "-1", "1e400", "9223372036854775807ns", "0x1p-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err == nil && (d < 0 || d > MaxDuration) {
			t.Fatalf("%q → %v, outside [0, MaxDuration]", s, d)
		}
	})
}

// A bare number of seconds is read in the one grammar of a number
// (ParseNumber's): drawn strings of number-ish bytes are durations
// exactly when they are numbers from 0 up to MaxDuration.
func TestBareDurationIsParseNumbersGrammar(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.StringOfN(rapid.SampledFrom([]rune("0123456789.+-eE")), 0, 10, -1).Draw(t, "s")
		f, nerr := ParseNumber(s)
		want := nerr == nil && f >= 0 && !(f == 0 && strings.HasPrefix(s, "-")) && f <= MaxDuration.Seconds()
		d, err := ParseDuration(s)
		if (err == nil) != want {
			t.Fatalf("%q: ParseDuration %v (%v), ParseNumber %v (%v)", s, d, err, f, nerr)
		}
		if want && d != time.Duration(math.Round(f*1e9)) {
			t.Fatalf("%q: %v, want %v seconds", s, d, f)
		}
	})
}
