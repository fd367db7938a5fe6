package ledgerfile

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// writtenTS gives the very time.Time that time.Parse gives, across the
// years a ts may name (0000 … 9999), the leap days and every month's end.
func TestWrittenTSIsTimeParse(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	check := func(s string) {
		t.Helper()
		got, ok := writtenTS(s)
		want, err := time.Parse(time.RFC3339Nano, s)
		if !ok || err != nil {
			if ok || err == nil {
				t.Fatalf("%s: writtenTS ok=%v, time.Parse err=%v", s, ok, err)
			}
			return
		}
		if want = want.UTC(); got != want {
			t.Fatalf("%s: writtenTS %v (%#v), time.Parse %v (%#v)", s, got, got, want, want)
		}
	}
	for _, y := range []int{0, 1, 4, 100, 399, 400, 1600, 1900, 1969, 1970, 2000, 2024, 2026, 2100, 2400, 9999} {
		for m := 1; m <= 12; m++ {
			for _, d := range []int{1, 28, 29, 30, 31} {
				check(fmt.Sprintf("%04d-%02d-%02dT00:00:00Z", y, m, d))
				check(fmt.Sprintf("%04d-%02d-%02dT23:59:59.999999999Z", y, m, d))
			}
		}
	}
	for range 200_000 {
		s := fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d.%09dZ", r.IntN(10000), 1+r.IntN(12), 1+r.IntN(31), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1e9))
		check(s)
	}
}
