package summary

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"retrygate/admit"
	"retrygate/ledgerfile"
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
