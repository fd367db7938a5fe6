package summary

import (
	"math"
	"math/bits"
	"slices"
	"time"

	"retrygate/admit"
)

// values keeps every value a percentile needs, exactly, as counts. The
// log writes durations in whole milliseconds and tokens as whole numbers,
// so a million rows hold a few thousand distinct values: counting them
// costs an increment per value and memory per distinct value, and the
// sorted order comes for free (no sort of a million floats: a plain sort
// took 136 ms per million, a radix sort 67 ms, counting needs neither).
// Durations are counted at the log's resolution (milliseconds), so a
// summary made while a run writes its rows equals one made from its log.
// A value with no unit (USD) is counted by its exact float64.
type values struct {
	dense  []uint32           // dense[k]: how many values are k units
	sparse map[int64]uint32   // whole units past the dense range
	other  map[float64]uint32 // values that are not a whole number of units: zeros and NaN,
	bits   bitsTable          // and the rest by their bits (equal bits, equal values)
	n      int64
	off    bool // counts nothing: a figure the summary's Options leave out
}

// denseUnits bounds the counted range that lives in an array: 32.8 s in
// milliseconds, or 32,768 tokens (128 KiB of counts at most, small
// enough to stay in cache); past it, a map holds the rarer values.
const denseUnits = 1 << 15

// fewValues is how many values a distribution keeps in its map before it
// gets the dense array: a group of a few rows (report --by job keeps one
// group per job) then costs bytes, not the array's kilobytes.
const fewValues = 256

func (v *values) addUnits(k int64) {
	if v.off {
		return
	}
	v.n++
	if v.dense == nil && v.n <= fewValues {
		if v.sparse == nil {
			v.sparse = map[int64]uint32{}
		}
		v.sparse[k]++
		return
	}
	if v.dense == nil {
		// Past a few values: the units within the dense range move there.
		for u, c := range v.sparse {
			if u < denseUnits {
				*v.denseAt(u) += c
				delete(v.sparse, u)
			}
		}
		if v.dense == nil {
			v.dense = []uint32{}
		}
	}
	if k < denseUnits {
		*v.denseAt(k)++
		return
	}
	if v.sparse == nil {
		v.sparse = map[int64]uint32{}
	}
	v.sparse[k]++
}

// denseAt is the dense count of k units (k < denseUnits), growing the array.
func (v *values) denseAt(k int64) *uint32 {
	if k >= int64(len(v.dense)) {
		grown := make([]uint32, max(int(k)+1, min(2*len(v.dense), denseUnits)))
		copy(grown, v.dense)
		v.dense = grown
	}
	return &v.dense[k]
}

// addDur counts a duration as the log keeps it (milliseconds), read in
// seconds.
func (v *values) addDur(d time.Duration) {
	if v.off {
		return
	}
	ms := int64(logged(d) / time.Millisecond)
	if ms >= 0 {
		v.addUnits(ms)
		return
	}
	v.addFloat(float64(ms) / msUnit)
}

// addCount counts a whole number (tokens, attempts).
func (v *values) addCount(k int64) {
	if k >= 0 {
		v.addUnits(k)
		return
	}
	v.addFloat(float64(k))
}

// addFloat counts a value that has no unit (USD).
func (v *values) addFloat(x float64) {
	if v.off {
		return
	}
	v.n++
	if x != 0 && x == x {
		v.bits.add(math.Float64bits(x))
		return
	}
	if v.other == nil {
		v.other = map[float64]uint32{}
	}
	v.other[x]++
}

// sorted finishes the values: per is how many counted units make one
// (msUnit for seconds kept as milliseconds, countUnit for counts), and k
// units read as k/per, the double nearest that decimal.
func (v *values) sorted(per float64) Sorted {
	return v.sortedAs(func(k int64) float64 { return float64(k) / per })
}

// sortedAs finishes the values, reading k counted units as value(k).
func (v *values) sortedAs(value func(int64) float64) Sorted {
	var s Sorted
	others := make([]float64, 0, len(v.other)+v.bits.n)
	for x := range v.other {
		others = append(others, x)
	}
	for i, b := range v.bits.keys {
		if v.bits.counts[i] != 0 {
			others = append(others, math.Float64frombits(b))
		}
	}
	slices.Sort(others)
	var keys []int64
	for k := range v.sparse {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	distinct := len(keys) + len(others)
	for _, c := range v.dense {
		if c != 0 {
			distinct++
		}
	}
	s.vals, s.cum = make([]float64, 0, distinct), make([]int64, 0, distinct)
	di, ki, oi := 0, 0, 0
	// Merge the three ascending sources, summing equal values.
	for {
		for di < len(v.dense) && v.dense[di] == 0 {
			di++
		}
		best, from := math.Inf(1), -1
		if di < len(v.dense) {
			best, from = value(int64(di)), 0
		}
		if ki < len(keys) {
			if x := value(keys[ki]); from < 0 || x < best {
				best, from = x, 1
			}
		}
		if oi < len(others) {
			if x := others[oi]; from < 0 || x < best {
				best, from = x, 2
			}
		}
		if from < 0 {
			break
		}
		var c int64
		switch from {
		case 0:
			c = int64(v.dense[di])
			di++
		case 1:
			c = int64(v.sparse[keys[ki]])
			ki++
		default:
			x := others[oi]
			c = int64(v.other[x]) // 0 for a NaN, as a map of floats gives
			if x != 0 && x == x {
				c = int64(v.bits.count(math.Float64bits(x)))
			}
			oi++
		}
		s.push(best, c)
	}
	*v = values{}
	return s
}

// Sorted is a distribution kept exactly: its distinct values ascending,
// each with how many times it was seen.
type Sorted struct {
	vals []float64
	cum  []int64 // cum[i]: how many values are <= vals[i]
	sum  float64
}

func (s *Sorted) push(x float64, c int64) {
	if c <= 0 {
		return
	}
	s.sum += x * float64(c)
	if n := len(s.vals); n > 0 && s.vals[n-1] == x {
		s.cum[n-1] += c
		return
	}
	s.vals = append(s.vals, x)
	s.cum = append(s.cum, s.Len()+c)
}

// SortedOf counts a list of values (tests, small lists).
func SortedOf(xs ...float64) Sorted {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	var s Sorted
	for _, x := range ys {
		s.push(x, 1)
	}
	return s
}

// merge sums distributions into one.
func merge(ds ...Sorted) Sorted {
	type pair struct {
		v float64
		c int64
	}
	var ps []pair
	for _, d := range ds {
		prev := int64(0)
		for i, v := range d.vals {
			ps = append(ps, pair{v, d.cum[i] - prev})
			prev = d.cum[i]
		}
	}
	slices.SortStableFunc(ps, func(a, b pair) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	var out Sorted
	for _, p := range ps {
		out.push(p.v, p.c)
	}
	return out
}

// Len is how many values there are.
func (s Sorted) Len() int64 {
	if len(s.cum) == 0 {
		return 0
	}
	return s.cum[len(s.cum)-1]
}

// Percentile is admit.Percentile's nearest rank over the counted values.
func (s Sorted) Percentile(p float64) float64 {
	n := s.Len()
	if n == 0 {
		return math.NaN()
	}
	rank := admit.NearestRank(n, p)
	i, _ := slices.BinarySearch(s.cum, rank)
	return s.vals[i]
}

// Mean is the values' average; NaN with none.
func (s Sorted) Mean() float64 {
	if s.Len() == 0 {
		return math.NaN()
	}
	return s.sum / float64(s.Len())
}

// Min is the smallest value; NaN with none.
func (s Sorted) Min() float64 { return s.Percentile(0) }

// Max is the largest value; NaN with none.
func (s Sorted) Max() float64 { return s.Percentile(100) }

// Each calls fn for every distinct value, ascending, with its count.
func (s Sorted) Each(fn func(v float64, n int64)) {
	prev := int64(0)
	for i, v := range s.vals {
		fn(v, s.cum[i]-prev)
		prev = s.cum[i]
	}
}

// Values lists every value, ascending, repeats included (for small
// distributions: a test, a table of a few rows).
func (s Sorted) Values() []float64 {
	out := make([]float64, 0, s.Len())
	s.Each(func(v float64, n int64) {
		for range n {
			out = append(out, v)
		}
	})
	return out
}

// bitsTable counts float64 values by their bits: an open-addressing
// table with linear probing, a multiply and a few compares per value
// where a map hashes (a float's bits, never 0: zeros are counted apart).
// Its slots grow with the distinct values, as a map's do.
type bitsTable struct {
	keys   []uint64 // 0: an empty slot
	counts []uint32
	n      int // distinct keys
	shift  uint
}

func (t *bitsTable) slot(k uint64) int { return int((k * 0x9E3779B97F4A7C15) >> t.shift) }

// add counts one k (k != 0).
func (t *bitsTable) add(k uint64) {
	if 4*(t.n+1) > 3*len(t.keys) {
		t.grow()
	}
	mask := len(t.keys) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			t.counts[i]++
			return
		case 0:
			t.keys[i], t.counts[i] = k, 1
			t.n++
			return
		}
	}
}

// count is how many times k was added.
func (t *bitsTable) count(k uint64) uint32 {
	if t.n == 0 {
		return 0
	}
	mask := len(t.keys) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return t.counts[i]
		case 0:
			return 0
		}
	}
}

func (t *bitsTable) grow() {
	old, oldCounts := t.keys, t.counts
	size := max(16, 2*len(old))
	t.keys, t.counts, t.n = make([]uint64, size), make([]uint32, size), 0
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	mask := size - 1
	for j, k := range old {
		if k == 0 {
			continue
		}
		i := t.slot(k)
		for t.keys[i] != 0 {
			i = (i + 1) & mask
		}
		t.keys[i], t.counts[i] = k, oldCounts[j]
		t.n++
	}
}
