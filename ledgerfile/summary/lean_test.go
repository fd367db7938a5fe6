package summary

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// NoStream leaves the streaming figures empty and every other figure as
// it was.
func TestNoStreamCountsEverythingElse(t *testing.T) {
	rows := []ledgerfile.Row{
		streamRow("a", 200*time.Millisecond, 1200*time.Millisecond, 101, admit.OK),
		streamRow("b", 200*time.Millisecond, 2200*time.Millisecond, 51, admit.OK),
		streamRow("c", 100*time.Millisecond, 300*time.Millisecond, 50, admit.Timeout),
	}
	rows[0].ITLMean, rows[0].HasITL = 12*time.Millisecond, true
	rows[2].JobEnd = ledgerfile.JobUnknown
	sum := func(o Options) *Summary {
		s := New(o)
		for i := range rows {
			s.Add(&rows[i], "t.log")
		}
		return s.Close()
	}
	full, lean := sum(Options{}), sum(Options{NoStream: true})
	assert.Equal(t, int64(2), full.Stream.TPOT.N)
	assert.Equal(t, int64(1), full.Stream.ITL.N)
	assert.NotNil(t, full.All.ITL)
	assert.Zero(t, lean.Stream.TPOT.N+lean.Stream.OutputTPS.N+lean.Stream.ITL.N)
	assert.Nil(t, lean.All.ITL)
	// Everything else alike (printed: NaN figures are never equal).
	full.Stream, lean.Stream = StreamFigures{}, StreamFigures{}
	show := func(s *Summary) string {
		var b strings.Builder
		for _, g := range append(s.Groups, s.All) {
			c := *g
			c.ITL = nil
			fmt.Fprintf(&b, "%+v\n", c)
		}
		c := *s
		c.Groups, c.All = nil, nil
		fmt.Fprintf(&b, "%+v", c)
		return b.String()
	}
	assert.Equal(t, show(full), show(lean))
}

// OnlyEndToEnd counts the jobs' end-to-end times, every count, sum and
// rate, and no other distribution.
func TestOnlyEndToEnd(t *testing.T) {
	rows := []ledgerfile.Row{
		streamRow("a", 200*time.Millisecond, 1200*time.Millisecond, 101, admit.OK),
		streamRow("b", 300*time.Millisecond, 900*time.Millisecond, 50, admit.ServerError),
		streamRow("b", 200*time.Millisecond, 2200*time.Millisecond, 51, admit.OK),
		streamRow("c", 100*time.Millisecond, 300*time.Millisecond, 50, admit.Timeout),
	}
	rows[1].JobEnd, rows[2].Attempt = "", 2
	rows[2].TS = rows[1].TS.Add(time.Second)
	rows[3].JobEnd = ledgerfile.JobUnknown
	for i := range rows {
		rows[i].CostUSD, rows[i].HasCost = 0.001*float64(i+1), true
	}
	sum := func(o Options) *Summary {
		s := New(o)
		for i := range rows {
			s.Add(&rows[i], "t.log")
		}
		return s.Close()
	}
	full, lean := sum(Options{Groups: []string{"s", "other"}}), sum(Options{Groups: []string{"s", "other"}, OnlyEndToEnd: true})
	assert.Equal(t, []float64{0.3, 1.2, 3.2}, lean.Jobs.EndToEnd.Values())
	assert.Equal(t, full.Jobs.EndToEnd, lean.Jobs.EndToEnd)
	for _, d := range []Sorted{lean.Jobs.Time, lean.Jobs.TimeToSuccess, lean.Jobs.Tokens, lean.Jobs.USD, lean.Jobs.AttemptsPerSuccess,
		lean.OK.Elapsed, lean.OK.Wait, lean.Content.Wait, lean.Content.Aside[5], lean.All.Wait.Values, lean.All.Elapsed.Values, lean.Groups[0].Tokens.Values} {
		assert.Zero(t, d.Len())
	}
	assert.Equal(t, int64(3), full.Jobs.Time.Len(), "the full summary has them")
	// Everything but the distributions alike.
	strip := func(s *Summary) string {
		var b strings.Builder
		for _, g := range append(s.Groups, s.All) {
			c := *g
			c.Wait, c.TTFB, c.Elapsed, c.Tokens = Dist{}, Dist{}, Dist{}, Dist{}
			fmt.Fprintf(&b, "%+v\n", c)
		}
		c := *s
		c.Groups, c.All, c.OK.Elapsed, c.OK.Wait, c.Content = nil, nil, Sorted{}, Sorted{}, ContentFigures{}
		c.Jobs.Time, c.Jobs.TimeToSuccess, c.Jobs.Tokens, c.Jobs.USD, c.Jobs.AttemptsPerSuccess = Sorted{}, Sorted{}, Sorted{}, Sorted{}, Sorted{}
		fmt.Fprintf(&b, "%+v", c)
		return b.String()
	}
	assert.Equal(t, strip(full), strip(lean))
	assert.Equal(t, int64(4), lean.All.Attempts)
	assert.InDelta(t, 0.010, float64(lean.All.USDTotal), 1e-12)
}

// Live counts each job at its job_end row and reuses its slot: the
// figures are those of the log read back, and memory follows the jobs in
// flight, not every job of the run.
func TestLiveCountsJobsAtTheirEnd(t *testing.T) {
	const jobs = 3 * jobChunk
	seats := []string{"a", "b", "c"}
	outcomes := []admit.Outcome{admit.ServerError, admit.RateLimited, admit.Timeout}
	var rows []ledgerfile.Row
	t0 := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	// Two jobs in flight at a time, their rows interleaved; a job of
	// three attempts touches three seats.
	for j := 0; j < jobs; j += 2 {
		for n := 1; n <= 1+j%3; n++ {
			last := n == 1+j%3
			ids := []int{j, j + 1}
			if last {
				ids = []int{j + 1, j} // the later job ends first
			}
			for _, id := range ids {
				r := streamRow(fmt.Sprintf("j%d", id), time.Duration(100+id%7)*time.Millisecond, time.Duration(400+id%13*100)*time.Millisecond, int64(20+id%5), admit.OK)
				r.TS = t0.Add(time.Duration(id)*time.Second + time.Duration(n)*time.Millisecond)
				r.Attempt, r.Seat, r.JobEnd = n, seats[n-1], ""
				r.CostUSD, r.HasCost = 0.0001*float64(1+id%11), true
				if !last {
					r.Outcome = outcomes[(id+n)%3]
				} else {
					r.JobEnd = ledgerfile.JobSucceeded
				}
				rows = append(rows, r)
			}
		}
	}
	opts := Options{Groups: seats, KeepOrder: true, Draw: true}
	read := New(opts)
	opts.Live = true
	live := New(opts)
	held := 0 // the most chunks the live summary held at once
	for i := range rows {
		read.Add(&rows[i], "t.log")
		live.Add(&rows[i], "")
		n := 0
		for _, c := range live.jobs {
			n += min(cap(c), 1)
		}
		held = max(held, n)
	}
	assert.LessOrEqual(t, held, 2, "two jobs in flight hold at most two chunks")
	assert.Empty(t, live.ids)
	assert.LessOrEqual(t, len(live.more), 3)
	assert.Len(t, read.jobs, jobs/jobChunk)
	show := func(s *Summary) string {
		var b strings.Builder
		for _, g := range append(s.Groups, s.All) {
			fmt.Fprintf(&b, "%+v\n", *g)
		}
		for _, tr := range s.Drawing.Timeline {
			fmt.Fprintf(&b, "%+v\n", tr)
		}
		c := *s
		c.Groups, c.All, c.Drawing = nil, nil, nil
		fmt.Fprintf(&b, "%+v", c)
		return b.String()
	}
	a, b := read.Close(), live.Close()
	assert.Equal(t, int64(jobs), b.Jobs.Jobs)
	assert.Equal(t, show(a), show(b))
}
