package rehearse

import (
	"bytes"
	"io"
	"slices"

	"retrygate/admit"
	"retrygate/ledgerfile"
)

// Tally summarises a run's rows per seat as they are written, for the
// table `rehearse` prints at the end.
type Tally struct {
	seats []*seatTally
	Ends  Ends
	Jobs  int
}

type seatTally struct {
	name      string
	attempts  int
	successes int
	waits     []float64
	elapsed   []float64
	tokens    int64
	refusals  map[string]int
}

// SeatSummary is one line of the summary table.
type SeatSummary struct {
	Seat       string         `json:"seat"`
	Attempts   int            `json:"attempts"`
	Successes  int            `json:"successes"`
	WaitP50    float64        `json:"wait_p50_s"`
	WaitP95    float64        `json:"wait_p95_s"`
	ElapsedP50 float64        `json:"elapsed_p50_s"`
	ElapsedP95 float64        `json:"elapsed_p95_s"`
	Tokens     int64          `json:"tokens"`
	Refusals   map[string]int `json:"refusals"`
}

// Add counts one row.
func (t *Tally) Add(r *ledgerfile.Row) {
	var s *seatTally
	for _, x := range t.seats {
		if x.name == r.Seat {
			s = x
			break
		}
	}
	if s == nil {
		s = &seatTally{name: r.Seat, refusals: map[string]int{}}
		t.seats = append(t.seats, s)
	}
	if !r.Unsent {
		s.attempts++
		if r.Outcome == admit.OK {
			s.successes++
		}
		s.waits = append(s.waits, r.Wait.Seconds())
		s.elapsed = append(s.elapsed, r.Elapsed.Seconds())
		s.tokens += r.Tokens
	}
	if reason := r.Reason(); reason != "" {
		s.refusals[reason]++
	}
	switch r.JobEnd {
	case "":
		return
	case ledgerfile.JobSucceeded:
		t.Ends.Succeeded++
	case ledgerfile.JobUnknown:
		t.Ends.Unknown++
	case ledgerfile.JobCancelled:
		t.Ends.Cancelled++
	default:
		t.Ends.Failed++
	}
	t.Jobs++
}

// Seats summarises each seat, in the order seats first appeared.
func (t *Tally) Seats() []SeatSummary {
	out := make([]SeatSummary, 0, len(t.seats))
	for _, s := range t.seats {
		w, e := slices.Clone(s.waits), slices.Clone(s.elapsed)
		slices.Sort(w)
		slices.Sort(e)
		sum := SeatSummary{
			Seat: s.name, Attempts: s.attempts, Successes: s.successes,
			Tokens: s.tokens, Refusals: s.refusals,
		}
		if len(w) > 0 {
			sum.WaitP50, sum.WaitP95 = admit.Percentile(w, 50), admit.Percentile(w, 95)
			sum.ElapsedP50, sum.ElapsedP95 = admit.Percentile(e, 50), admit.Percentile(e, 95)
		}
		out = append(out, sum)
	}
	return out
}

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
