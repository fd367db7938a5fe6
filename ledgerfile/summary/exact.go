package summary

import (
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"unsafe"
)

// Dec is a non-negative decimal held exactly: m × 10^e, m a 128-bit
// whole number (hi, lo). Sums of durations (in microseconds), of counts
// and of amounts (each the decimal its row wrote: the shortest one that
// reads back as its double) are Decs, so a mean, a sum or a share is
// computed from the decimals the rows wrote and rounded only for display
// (DESIGN.md, "A job, exactly"). 38 digits hold any sum a log can make
// of the values it keeps; past them (amounts of very different sizes in
// one sum), the smallest digits are rounded, never the largest: a Dec
// never wraps nor saturates.
type Dec struct {
	hi, lo uint64
	e      int32
}

// DecOf is n × 10^e.
func DecOf(n uint64, e int32) Dec { return Dec{lo: n, e: e} }

// decAmount is a non-negative amount (cost_usd) as the decimal its row
// wrote: the shortest decimal that reads back as x (the writer writes
// that one; the reader keeps the double nearest what it read). NaN,
// infinities and negatives are 0.
func decAmount(x float64) Dec {
	if !(x > 0) || math.IsInf(x, 0) {
		return Dec{}
	}
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], x, 'e', -1, 64) // d[.ddd]e±xx, at most 17 digits
	var m uint64
	frac, point, i := 0, false, 0
	for ; i < len(b) && b[i] != 'e'; i++ {
		if b[i] == '.' {
			point = true
			continue
		}
		m = m*10 + uint64(b[i]-'0')
		if point {
			frac++
		}
	}
	exp, neg := 0, false
	for _, c := range b[i+1:] {
		switch {
		case c == '-':
			neg = true
		case c >= '0' && c <= '9':
			exp = exp*10 + int(c-'0')
		}
	}
	if neg {
		exp = -exp
	}
	return Dec{lo: m, e: int32(exp - frac)}.norm()
}

// IsZero reports whether d is 0.
func (d Dec) IsZero() bool { return d.hi == 0 && d.lo == 0 }

// norm strips trailing zeros of m, so equal values are equal Decs (a
// map key) and the exponent stays as coarse as the value allows.
func (d Dec) norm() Dec {
	if d.IsZero() {
		return Dec{}
	}
	for {
		q, r := div10(d.hi, d.lo)
		if r != 0 {
			return d
		}
		d.hi, d.lo = q.hi, q.lo
		d.e++
	}
}

type u128 struct{ hi, lo uint64 }

func div10(hi, lo uint64) (u128, uint64) {
	qh, r := bits.Div64(0, hi, 10)
	ql, r := bits.Div64(r, lo, 10)
	return u128{qh, ql}, r
}

// mulSmall is (hi, lo) × k, and whether it fit in 128 bits.
func mulSmall(hi, lo, k uint64) (u128, bool) {
	h1, l := bits.Mul64(lo, k)
	h2, h3 := bits.Mul64(hi, k)
	h, c := bits.Add64(h1, h3, 0)
	return u128{h, l}, h2 == 0 && c == 0
}

// scaleUp is d with its exponent lowered by k (m × 10^k), when it fits:
// at most two multiplications.
func (d Dec) scaleUp(k int32) (Dec, bool) {
	if d.IsZero() {
		return Dec{e: d.e - k}, true
	}
	for k > 0 {
		step := min(k, 19)
		m, ok := mulSmall(d.hi, d.lo, pow10u[step])
		if !ok {
			return d, false
		}
		d.hi, d.lo, d.e, k = m.hi, m.lo, d.e-step, k-step
	}
	return d, true
}

// pow10u[k] is 10^k.
var pow10u = func() (p [20]uint64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// roundDown is d with its exponent raised by one (the last digit rounded
// half to even).
func (d Dec) roundDown() Dec {
	q, r := div10(d.hi, d.lo)
	if r > 5 || r == 5 && q.lo&1 == 1 {
		var c uint64
		q.lo, c = bits.Add64(q.lo, 1, 0)
		q.hi += c
	}
	return Dec{q.hi, q.lo, d.e + 1}
}

// Add is d + x, exact while the sum holds 38 digits.
func (d Dec) Add(x Dec) Dec {
	if d.e == x.e && d.hi|x.hi == 0 { // the common case, small enough to inline
		if lo := d.lo + x.lo; lo >= d.lo { // no carry
			return Dec{lo: lo, e: d.e}
		}
	}
	return d.add(x)
}

func (d Dec) add(x Dec) Dec {
	switch {
	case x.IsZero():
		return d
	case d.IsZero():
		return x
	}
	// Bring both to the finer exponent; when the coarser one cannot be
	// scaled to it, the finer one gives up its smallest digits.
	if d.e < x.e {
		d, x = x, d
	}
	for d.e > x.e {
		if s, ok := d.scaleUp(d.e - x.e); ok {
			d = s
			break
		}
		x = x.roundDown()
	}
	lo, c := bits.Add64(d.lo, x.lo, 0)
	hi, c2 := bits.Add64(d.hi, x.hi, c)
	if c2 != 0 {
		// Past 128 bits: both lose a digit and add again.
		return d.roundDown().Add(x.roundDown())
	}
	return Dec{hi, lo, d.e}
}

// Mul is d × n (n ≥ 0), exact while the product holds 38 digits, and
// rounded to 38 digits past that.
func (d Dec) Mul(n int64) Dec {
	if n <= 0 || d.IsZero() {
		return Dec{}
	}
	// The 192-bit product (p2, p1, p0), then tenths off it until it fits.
	h0, p0 := bits.Mul64(d.lo, uint64(n))
	h1, l1 := bits.Mul64(d.hi, uint64(n))
	p1, c := bits.Add64(h0, l1, 0)
	p2 := h1 + c
	e, sticky := d.e, false
	var r uint64
	for p2 != 0 {
		if r != 0 {
			sticky = true
		}
		p2, r = bits.Div64(0, p2, 10)
		p1, r = bits.Div64(r, p1, 10)
		p0, r = bits.Div64(r, p0, 10)
		e++
	}
	if r > 5 || r == 5 && (sticky || p0&1 == 1) {
		var c uint64
		p0, c = bits.Add64(p0, 1, 0)
		p1 += c
	}
	return Dec{p1, p0, e}
}

// Cmp compares d and x: -1, 0 or +1.
func (d Dec) Cmp(x Dec) int {
	// At one exponent the mantissas compare as numbers; a Dec that cannot
	// be brought there is larger than any that fits (past 38 digits).
	a, b := d, x
	if a.e > b.e {
		if s, ok := a.scaleUp(a.e - b.e); ok {
			a = s
		} else {
			return 1
		}
	} else if b.e > a.e {
		if s, ok := b.scaleUp(b.e - a.e); ok {
			b = s
		} else {
			return -1
		}
	}
	switch {
	case a.hi != b.hi:
		return cmpU(a.hi, b.hi)
	case a.lo != b.lo:
		return cmpU(a.lo, b.lo)
	}
	return 0
}

func cmpU(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}

// Rat is d exactly.
func (d Dec) Rat() *big.Rat {
	m := new(big.Int).SetUint64(d.hi)
	m.Lsh(m, 64).Or(m, new(big.Int).SetUint64(d.lo))
	r := new(big.Rat).SetInt(m)
	if d.e != 0 {
		p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs32(d.e))), nil)
		if d.e > 0 {
			r.Mul(r, new(big.Rat).SetInt(p))
		} else {
			r.Quo(r, new(big.Rat).SetInt(p))
		}
	}
	return r
}

func abs32(e int32) int32 { return max(e, -e) }

// Float64 is the double nearest d: it prints as d's decimal where d has
// no more digits than a double holds. strconv reads the decimal written
// out, correctly rounded, without big numbers.
func (d Dec) Float64() float64 {
	if d.hi == 0 && d.lo < 1<<53 && d.e >= -22 && d.e <= 22 {
		// Both exact doubles: one division or product, correctly rounded.
		if d.e < 0 {
			return float64(d.lo) / pow10[-d.e]
		}
		return float64(d.lo) * pow10[d.e]
	}
	var buf [64]byte
	b := d.appendDigits(buf[:0])
	b = append(b, 'e')
	b = strconv.AppendInt(b, int64(d.e), 10)
	f, _ := strconv.ParseFloat(unsafe.String(&b[0], len(b)), 64)
	return f
}

// appendDigits appends the mantissa's decimal digits.
func (d Dec) appendDigits(b []byte) []byte {
	if d.hi == 0 {
		return strconv.AppendUint(b, d.lo, 10)
	}
	// (hi, lo) = q × 10^19 + r, and q, under 2^128 / 10^19, once more.
	const e19 = 10_000_000_000_000_000_000
	qh := d.hi / e19
	ql, r := bits.Div64(d.hi%e19, d.lo, e19)
	if qh == 0 {
		return appendPadded(strconv.AppendUint(b, ql, 10), r)
	}
	q2, r2 := bits.Div64(qh, ql, e19)
	return appendPadded(appendPadded(strconv.AppendUint(b, q2, 10), r2), r)
}

// appendPadded appends n as 19 digits.
func appendPadded(b []byte, n uint64) []byte {
	var d [19]byte
	for i := 18; i >= 0; i-- {
		d[i] = byte('0' + n%10)
		n /= 10
	}
	return append(b, d[:]...)
}

var pow10 = func() (p [23]float64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// ratFloat is the double nearest r, NaN for a nil r.
func ratFloat(r *big.Rat) float64 {
	if r == nil {
		return math.NaN()
	}
	f, _ := r.Float64()
	return f
}

// quo is a ÷ b exactly, nil when b is 0.
func quo(a, b *big.Rat) *big.Rat {
	if b.Sign() == 0 {
		return nil
	}
	return new(big.Rat).Quo(a, b)
}
