package summary

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// values keeps every value a percentile needs as counts of whole units:
// durations in the log's milliseconds, tokens as whole numbers, and a
// value with no unit of the log's (TPOT, output tokens/s, USD) at a fixed
// resolution finer than any output prints (see the callers). So memory
// follows the range of the values, never the rows: an array for the
// first denseUnits units, a map past it; and the sorted order comes for
// free (no sort of a million floats: a plain sort took 136 ms per
// million, a radix sort 67 ms, counting needs neither). Durations are
// counted at the log's resolution, so a summary made while a run writes
// its rows equals one made from its log.
type values struct {
	dense  []uint32         // dense[k]: how many values are k units
	sparse map[int64]uint32 // the units past the dense range (and below 0)
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

// addUnits counts one value of k units; a whole number (tokens,
// attempts) is counted as itself.
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
			if u >= 0 && u < denseUnits {
				*v.denseAt(u) += c
				delete(v.sparse, u)
			}
		}
		if v.dense == nil {
			v.dense = []uint32{}
		}
	}
	if k >= 0 && k < denseUnits {
		*v.denseAt(k)++
		return
	}
	if v.sparse == nil {
		v.sparse = map[int64]uint32{}
	}
	v.sparse[k]++
}

// denseAt is the dense count of k units (0 <= k < denseUnits), growing the array.
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
func (v *values) addDur(d time.Duration) { v.addUnits(int64(logged(d) / time.Millisecond)) }

// addScaled counts x in units of 1/per (sorted(per) reads them back); a
// NaN is not counted.
func (v *values) addScaled(x, per float64) {
	if x == x {
		v.addUnits(int64(math.Round(x * per)))
	}
}

// sorted finishes the values: per is how many counted units make one
// (msUnit for seconds kept as milliseconds, countUnit for counts), and k
// units read as k/per, the double nearest that decimal.
func (v *values) sorted(per float64) Sorted {
	var s Sorted
	keys := make([]int64, 0, len(v.sparse))
	for k := range v.sparse {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	i := 0
	for ; i < len(keys) && keys[i] < 0; i++ {
		s.push(float64(keys[i])/per, int64(v.sparse[keys[i]]))
	}
	for k, c := range v.dense {
		s.push(float64(k)/per, int64(c))
	}
	for ; i < len(keys); i++ {
		s.push(float64(keys[i])/per, int64(v.sparse[keys[i]]))
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
		d.Each(func(v float64, c int64) { ps = append(ps, pair{v, c}) })
	}
	slices.SortStableFunc(ps, func(a, b pair) int { return cmp.Compare(a.v, b.v) })
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
