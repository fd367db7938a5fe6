package rehearse

import (
	"bytes"
	"io"

	"github.com/retrygate/retrygate/ledgerfile"
)

// HighestRun scans a log for the highest run number in it: `# run rN …`
// comment lines and job ids of the form rN-k. It reads leniently (a row
// it cannot make sense of is not its business: `report` is the strict
// reader), so a damaged log never stops a new run from numbering itself.
func HighestRun(r io.Reader) (int, error) {
	lf := ledgerfile.NewLineFilter(r)
	high := 0
	for {
		line, err := lf.Next()
		if rest, ok := bytes.CutPrefix(line, []byte("# run r")); ok {
			if n, k := leadingInt(rest); k > 0 {
				high = max(high, n)
			}
		} else if i := bytes.Index(line, []byte("job=")); i == 0 || (i > 0 && line[i-1] == ' ') {
			v := bytes.TrimPrefix(line[i+4:], []byte(`"`))
			if len(v) > 1 && v[0] == 'r' {
				if n, k := leadingInt(v[1:]); k > 0 && k+1 < len(v) && v[1+k] == '-' {
					high = max(high, n)
				}
			}
		}
		if err == io.EOF {
			return high, nil
		}
		if err != nil {
			return high, err
		}
	}
}

// leadingInt reads the decimal number b starts with and how many digits
// it took; (0, 0) when there is none or it has more than 9 digits.
func leadingInt(b []byte) (n, k int) {
	for k < len(b) && b[k] >= '0' && b[k] <= '9' {
		if k == 9 {
			return 0, 0
		}
		n = n*10 + int(b[k]-'0')
		k++
	}
	return n, k
}
