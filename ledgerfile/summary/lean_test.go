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
