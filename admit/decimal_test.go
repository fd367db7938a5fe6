package admit

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"pgregory.net/rapid"
)

// ParseDecimal's grammar is the one ParseNumber had (a regular
// expression, then ParseFloat): drawn strings of number-ish bytes are
// taken or refused alike.
func TestParseDecimalIsParseNumbersGrammar(t *testing.T) {
	old := regexp.MustCompile(`^[+-]*[0-9.]*[0-9][0-9.]*([eE][+-]*[0-9]+)?$`)
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.StringOfN(rapid.SampledFrom([]rune("0123456789.+-eEx_pinfa ")), 0, 12, -1).Draw(t, "s")
		_, err := strconv.ParseFloat(s, 64)
		want := old.MatchString(s) && (err == nil || err.(*strconv.NumError).Err == strconv.ErrRange)
		_, got := ParseDecimal(s)
		if got != want {
			t.Fatalf("%q: ParseDecimal %v, the old grammar %v", s, got, want)
		}
	})
}

func TestDecimalScaled(t *testing.T) {
	for in, want := range map[string]uint64{
		"0": 0, "0.0004": 400, "1.2345675": 1234568, "1.2345665": 1234567, "1.23456749999999999999": 1234567,
		"0.0000005": 1, "0.00000049": 0, "1e-6": 1, "2.5e3": 2_500_000_000, ".5": 500_000, "5.": 5_000_000,
		"1000000000": 1e15, "0e999999999": 0, "000000000000000000000000001": 1_000_000,
	} {
		d, ok := ParseDecimal(in)
		assert.True(t, ok, in)
		n, ok := d.Scaled(6, 1e15)
		assert.True(t, ok, in)
		assert.Equal(t, want, n, in)
	}
	for _, in := range []string{"1000000000.000001", "1e16", "99999999999999999999999", "1e999999999"} {
		d, _ := ParseDecimal(in)
		_, ok := d.Scaled(6, 1e15)
		assert.False(t, ok, in)
	}
}
