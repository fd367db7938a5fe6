package summary

import (
	"math"
	"math/big"
	"slices"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// values keeps every value a percentile needs as counts of whole units:
// durations in the reader's microseconds (ledgerfile.ReadResolution),
// tokens as whole numbers, and a value with no unit of the log's (TPOT,
// output tokens/s) at a fixed resolution (see the callers); amounts
// (USD) as the exact decimals they are (addDec). So memory follows the
// range of the values, never the rows: an array for the first denseUnits
// steps, a map past them and for values off the step; and the sorted
// order comes for free (no sort of a million floats: a plain sort took
// 136 ms per million, a radix sort 67 ms, counting needs neither).
// Durations are counted as the reader keeps them, so a summary made
// while a run writes its rows equals one made from its log.
type values struct {
	dense  []uint32         // dense[k]: how many values are k steps
	sparse map[int64]uint32 // values in units: past the dense range, below 0, or off the step
	decs   []Dec            // amounts (addDec), each once: sorted at the end
	step   int64            // units a dense slot stands for: 1000 µs for durations (the writer's millisecond), else 1
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
	if v.step == 0 {
		v.step = 1
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
			if i, ok := v.slot(u); ok {
				*v.denseAt(i) += c
				delete(v.sparse, u)
			}
		}
		if v.dense == nil {
			v.dense = []uint32{}
		}
	}
	if i, ok := v.slot(k); ok {
		*v.denseAt(i)++
		return
	}
	if v.sparse == nil {
		v.sparse = map[int64]uint32{}
	}
	v.sparse[k]++
}

// slot is k units' place in the dense array, if it has one.
func (v *values) slot(k int64) (int64, bool) {
	if k < 0 || k%v.step != 0 || k/v.step >= denseUnits {
		return 0, false
	}
	return k / v.step, true
}

// denseAt is the dense count of k steps (0 <= k < denseUnits), growing the array.
func (v *values) denseAt(k int64) *uint32 {
	if k >= int64(len(v.dense)) {
		grown := make([]uint32, max(int(k)+1, min(2*len(v.dense), denseUnits)))
		copy(grown, v.dense)
		v.dense = grown
	}
	return &v.dense[k]
}

// addDur counts a duration as the reader keeps it, in microseconds
// (secExp): a value the writer wrote, a whole millisecond, takes a dense
// slot; a hand-written finer one, the map.
func (v *values) addDur(d time.Duration) {
	if v.off {
		return
	}
	if v.step == 0 {
		v.step = int64(ledgerfile.WriteResolution / ledgerfile.ReadResolution)
	}
	v.addUnits(micros(d))
}

// micros is d in the reader's microseconds.
func micros(d time.Duration) int64 { return int64(ledgerfile.Kept(d) / ledgerfile.ReadResolution) }

// addDec counts an exact amount.
func (v *values) addDec(x Dec) {
	if v.off {
		return
	}
	v.n++
	v.decs = append(v.decs, x.norm())
}

// sorted finishes the values: a counted unit is 10^-exp of the value
// (secExp for seconds kept as microseconds, countExp for counts), so k
// units read as the decimal k × 10^-exp, exactly, and as the double
// nearest it.
func (v *values) sorted(exp int32) Sorted {
	var s Sorted
	if len(v.decs) > 0 {
		s.grow(len(v.decs))
		slices.SortFunc(v.decs, cmpDec)
		for _, d := range v.decs {
			s.push(d, 1) // push counts a repeat with the one before
		}
		*v = values{}
		return s
	}
	keys := make([]int64, 0, len(v.sparse))
	for k := range v.sparse {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	distinct := len(keys)
	for _, c := range v.dense {
		if c > 0 {
			distinct++
		}
	}
	s.grow(distinct)
	i := 0
	unit := func(k int64) Dec {
		if k < 0 {
			return Dec{} // never counted: every counted value is at least 0
		}
		return DecOf(uint64(k), -exp)
	}
	next := func(limit int64) { // the map's units below limit
		for ; i < len(keys) && keys[i] < limit; i++ {
			s.push(unit(keys[i]), int64(v.sparse[keys[i]]))
		}
	}
	for k, c := range v.dense {
		u := int64(k) * v.step
		next(u)
		if i < len(keys) && keys[i] == u {
			c += v.sparse[keys[i]]
			i++
		}
		s.push(unit(u), int64(c))
	}
	next(math.MaxInt64)
	*v = values{}
	return s
}

// cmpDec orders exact values.
func cmpDec(a, b Dec) int {
	if a == b {
		return 0
	}
	return a.Cmp(b)
}

// Sorted is a distribution kept exactly: its distinct values ascending,
// each with how many times it was seen.
type Sorted struct {
	vals  []float64 // each the double nearest exact's
	exact []Dec
	cum   []int64 // cum[i]: how many values are <= vals[i]
	sum   Dec
}

// grow makes room for n more distinct values.
func (s *Sorted) grow(n int) {
	s.vals, s.exact, s.cum = slices.Grow(s.vals, n), slices.Grow(s.exact, n), slices.Grow(s.cum, n)
}

func (s *Sorted) push(x Dec, c int64) {
	if c <= 0 {
		return
	}
	x = x.norm()
	s.sum = s.sum.Add(x.Mul(c))
	if n := len(s.exact); n > 0 && s.exact[n-1] == x {
		s.cum[n-1] += c
		return
	}
	s.vals = append(s.vals, x.Float64())
	s.exact = append(s.exact, x)
	s.cum = append(s.cum, s.Len()+c)
}

// SortedOf counts a list of values (tests, small lists), each the
// decimal it prints as; negative values count as 0.
func SortedOf(xs ...float64) Sorted {
	ds := make([]Dec, len(xs))
	for i, x := range xs {
		ds[i] = decAmount(x)
	}
	slices.SortFunc(ds, cmpDec)
	var s Sorted
	for _, d := range ds {
		s.push(d, 1)
	}
	return s
}

// merge sums distributions into one.
func merge(ds ...Sorted) Sorted {
	type pair struct {
		v Dec
		c int64
	}
	var ps []pair
	total := 0
	for _, d := range ds {
		total += len(d.exact)
	}
	ps = make([]pair, 0, total)
	for _, d := range ds {
		for i, x := range d.exact {
			ps = append(ps, pair{x, d.count(i)})
		}
	}
	slices.SortStableFunc(ps, func(a, b pair) int { return cmpDec(a.v, b.v) })
	var out Sorted
	out.grow(len(ps))
	for _, p := range ps {
		out.push(p.v, p.c)
	}
	return out
}

// count is how many times the i-th distinct value was seen.
func (s Sorted) count(i int) int64 {
	if i == 0 {
		return s.cum[0]
	}
	return s.cum[i] - s.cum[i-1]
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
	return s.vals[s.rank(p)]
}

// rank is the index of the distinct value at nearest rank p.
func (s Sorted) rank(p float64) int {
	i, _ := slices.BinarySearch(s.cum, admit.NearestRank(s.Len(), p))
	return i
}

// Mean is the double nearest the values' exact average; NaN with none.
func (s Sorted) Mean() float64 { return ratFloat(s.MeanRat()) }

// MeanRat is the values' average, exactly; nil with none.
func (s Sorted) MeanRat() *big.Rat {
	if s.Len() == 0 {
		return nil
	}
	return new(big.Rat).Quo(s.sum.Rat(), new(big.Rat).SetInt64(s.Len()))
}

// PercentileRat is Percentile exactly; nil with no values.
func (s Sorted) PercentileRat(p float64) *big.Rat {
	if s.Len() == 0 {
		return nil
	}
	return s.exact[s.rank(p)].Rat()
}

// Sum is the values' sum, exactly.
func (s Sorted) Sum() Dec { return s.sum }

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
