package admit

// Decimal is a number as a person or a log writes it, read without a
// float in between: (Int.Frac) × 10^Exp, Int and Frac its digits as
// written (views of the text). ParseDecimal is the one grammar of a
// number retrygate reads (ParseNumber's, and rehearsal.log's): digits
// with at most one point, at least one digit, an optional sign and an
// optional exponent; never hex, underscores, inf or nan.
type Decimal struct {
	Neg       bool
	Int, Frac string
	Exp       int // clamped to ±maxExp: past it every value is 0 or too large anyway
}

const maxExp = 1 << 20

// ParseDecimal reads s (no surrounding space) in the grammar above; ok
// is false for anything else. It allocates nothing.
func ParseDecimal(s string) (d Decimal, ok bool) {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		d.Neg = s[i] == '-'
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	d.Int = s[start:i]
	if i < len(s) && s[i] == '.' {
		i++
		start = i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		d.Frac = s[start:i]
	}
	if d.Int == "" && d.Frac == "" {
		return Decimal{}, false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		neg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			neg = s[i] == '-'
			i++
		}
		start = i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if d.Exp < maxExp {
				d.Exp = d.Exp*10 + int(s[i]-'0')
			}
			i++
		}
		if i == start {
			return Decimal{}, false
		}
		d.Exp = min(d.Exp, maxExp)
		if neg {
			d.Exp = -d.Exp
		}
	}
	return d, i == len(s)
}

// Scaled is |d| × 10^k rounded half up to a whole number, when that is at
// most limit: the exact count of 10^-k units d holds (k = 6: seconds to
// the microsecond). Digits past the unit are read only to round.
func (d Decimal) Scaled(k int, limit uint64) (n uint64, ok bool) {
	total := len(d.Int) + len(d.Frac)
	digit := func(i int) uint64 { // the i-th digit, point removed; 0 outside them
		switch {
		case i < 0 || i >= total:
			return 0
		case i < len(d.Int):
			return uint64(d.Int[i] - '0')
		}
		return uint64(d.Frac[i-len(d.Int)] - '0')
	}
	first := 0 // the first digit that is not 0
	for first < total && digit(first) == 0 {
		first++
	}
	if first == total {
		return 0, true
	}
	// The units are the digits before cut; digit(cut) rounds them.
	cut := len(d.Int) + d.Exp + k
	if cut-first > 20 {
		return 0, false // at least 10^20 units: past any uint64
	}
	for i := first; i < cut; i++ {
		c := digit(i)
		if n > (limit-c)/10 || limit < c {
			return 0, false
		}
		n = n*10 + c
	}
	if digit(cut) >= 5 {
		if n >= limit {
			return 0, false
		}
		n++
	}
	return n, true
}

// Zero reports whether every digit of d is 0.
func (d Decimal) Zero() bool {
	for _, s := range [...]string{d.Int, d.Frac} {
		for i := range len(s) {
			if s[i] != '0' {
				return false
			}
		}
	}
	return true
}
