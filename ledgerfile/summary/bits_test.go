package summary

import (
	"math"
	"math/rand/v2"
	"testing"
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
