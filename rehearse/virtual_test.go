package rehearse

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The event heap pops the least pending event by (at, seq), with pushes
// and pops interleaved as the virtual driver does them, ties on at
// included.
func TestEventHeapOrder(t *testing.T) {
	rng := seeded(7)
	var l Loop
	var pending []event
	seq := uint64(0)
	least := func() int {
		m := 0
		for i := range pending {
			if pending[i].before(&pending[m]) {
				m = i
			}
		}
		return m
	}
	pops := 0
	for round := 0; round < 2000; round++ {
		for range rng.IntN(9) {
			seq++
			e := event{at: rng.Int64N(40), seq: seq}
			l.push(e)
			pending = append(pending, e)
		}
		n := rng.IntN(9)
		if round == 1999 {
			n = len(pending)
		}
		for range n {
			if len(pending) == 0 {
				break
			}
			m := least()
			require.Equal(t, pending[m], l.pop(), "pop %d", pops)
			pending = slices.Delete(pending, m, m+1)
			pops++
		}
		require.Len(t, l.vheap, len(pending))
	}
	require.Empty(t, l.vheap)
	require.Greater(t, pops, 5000)
}

// BenchmarkEventHeap is the open-loop simulator's heap traffic: about 64
// jobs in flight, each pop followed by a push a random time later.
func BenchmarkEventHeap(b *testing.B) {
	rng := seeded(1)
	var l Loop
	seq := uint64(0)
	for range 64 {
		seq++
		l.push(event{at: rng.Int64N(3e9), seq: seq})
	}
	b.ReportAllocs()
	for b.Loop() {
		e := l.pop()
		seq++
		l.push(event{at: e.at + rng.Int64N(3e9), seq: seq})
	}
}
