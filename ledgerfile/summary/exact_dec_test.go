package summary

import (
	"math/big"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// A Dec sum of amounts is the exact sum of the decimals they print as
// (strconv's shortest form, which the writer writes), and its double the
// one nearest that sum: 0.1 + 0.2 is 0.3.
func TestDecSumsTheDecimalsWritten(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var d Dec
		want := new(big.Rat)
		for range rapid.IntRange(0, 50).Draw(t, "n") {
			x := rapid.OneOf(
				rapid.Float64Range(1e-6, 1e12), // 17 digits each: the sums stay within 38
				rapid.Map(rapid.IntRange(0, 1_000_000), func(n int) float64 { return float64(n) / 1e6 }),
				rapid.Map(rapid.IntRange(0, 1000), func(n int) float64 { return float64(n) / 1e9 }),
			).Draw(t, "x")
			d = d.Add(decAmount(x))
			r, _ := new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64))
			want.Add(want, r)
		}
		if d.Rat().Cmp(want) != 0 {
			t.Fatalf("sum %s, want %s", d.Rat().FloatString(30), want.FloatString(30))
		}
		if f, _ := want.Float64(); d.Float64() != f {
			t.Fatalf("double %v, want %v", d.Float64(), f)
		}
		k := rapid.Int64Range(0, 1<<20).Draw(t, "k")
		// A product past 38 digits loses its smallest digits, never more.
		exact := new(big.Rat).Mul(want, new(big.Rat).SetInt64(k))
		diff := new(big.Rat).Sub(d.Mul(k).Rat(), exact)
		if diff.Abs(diff).Cmp(new(big.Rat).Quo(exact, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(36), nil)))) > 0 {
			t.Fatalf("× %d: %s, want %s", k, d.Mul(k).Rat().FloatString(30), exact.FloatString(30))
		}
	})
	if got := decAmount(0.1).Add(decAmount(0.2)).Float64(); got != 0.3 {
		t.Fatalf("0.1 + 0.2 = %v", got)
	}
}

// A Dec's double and its order need no big numbers, and agree with them
// across the whole 128-bit range.
func TestDecFloatAndOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		draw := func(l string) Dec {
			return Dec{hi: rapid.Uint64Range(0, 1<<63).Draw(t, l+"hi") >> rapid.UintRange(0, 64).Draw(t, l+"shift"),
				lo: rapid.Uint64().Draw(t, l+"lo"), e: int32(rapid.IntRange(-40, 12).Draw(t, l+"e"))}
		}
		a, b := draw("a"), draw("b")
		if want, _ := a.Rat().Float64(); a.Float64() != want {
			t.Fatalf("%+v: %v, want %v", a, a.Float64(), want)
		}
		if got, want := a.Cmp(b), a.Rat().Cmp(b.Rat()); got != want {
			t.Fatalf("%+v vs %+v: %d, want %d", a, b, got, want)
		}
	})
}
