package summary

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// bitsTable counts what a map counts: every value, as often as it was
// added, through every growth, with values that crowd one slot.
func TestBitsTableCountsAsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab bitsTable
	want := map[uint64]uint32{}
	for i := range 200_000 {
		var k uint64
		switch i % 3 {
		case 0:
			k = math.Float64bits(float64(rng.IntN(5000)+1) / 7) // repeats (never 0: zeros are counted apart)
		case 1:
			k = uint64(rng.IntN(63)+1) << 58 // the same low bits
		default:
			k = rng.Uint64() | 1
		}
		tab.add(k)
		want[k]++
	}
	if tab.n != len(want) {
		t.Fatalf("%d distinct, want %d", tab.n, len(want))
	}
	for k, c := range want {
		if got := tab.count(k); got != c {
			t.Fatalf("count(%x) = %d, want %d", k, got, c)
		}
	}
	if got := tab.count(12345); got != 0 && want[12345] == 0 {
		t.Fatalf("count of a value never added: %d", got)
	}
	var empty bitsTable
	if empty.count(7) != 0 {
		t.Fatal("an empty table counts something")
	}
}

// logged is Duration.Round to the millisecond, for every duration.
func TestLoggedIsRoundToMillisecond(t *testing.T) {
	ds := []time.Duration{0, 1, 499_999, 500_000, 500_001, 999_999, 1_000_000, 1_500_000, 2_500_000,
		-1, -500_000, -1_500_000, math.MaxInt64, math.MinInt64, 1<<62 + 500_000, 1 << 62, 7_200_000_001}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		ds = append(ds, time.Duration(r.Int64N(1<<50)), -time.Duration(r.Int64N(1<<50)), time.Duration(r.Uint64()))
	}
	for _, d := range ds {
		if got, want := logged(d), d.Round(time.Millisecond); got != want {
			t.Fatalf("logged(%d) = %d, Round gives %d", d, got, want)
		}
	}
}
