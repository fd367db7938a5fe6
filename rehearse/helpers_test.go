package rehearse

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/script"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// t0 is the fixed Now of every virtual run in these tests.
var t0 = time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)

// plans is a planner that plays its plans in order, then repeats the last.
type plans []seat.Plan

func (p plans) PlanFor(n int) seat.Plan { return p[min(n, len(p)-1)] }

// rows collects copies of every row the loop writes.
type rows []ledgerfile.Row

func (r *rows) sink(row *ledgerfile.Row) { *r = append(*r, *row) }

// log renders rows as rehearsal.log lines.
func (r rows) log() string {
	var b []byte
	for i := range r {
		b = ledgerfile.AppendRow(b, &r[i])
	}
	return string(b)
}

func spec(name string, p seat.Planner) SeatSpec {
	return SeatSpec{Config: seat.Config{Name: name, Model: "m-" + name}, Planner: p}
}

func scriptSpec(t testing.TB, file string) SeatSpec {
	t.Helper()
	sc, err := script.Load(filepath.Join("..", "testdata", "seats", file+".yaml"))
	require.NoError(t, err)
	return SeatSpec{Config: seat.Config{Name: file, Model: sc.Model()}, Planner: sc}
}

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// newLoop builds a loop writing into out.
func newLoop(t testing.TB, p Policy, jobs int, seed uint64, out *rows, seats ...SeatSpec) *Loop {
	t.Helper()
	l, err := New(Config{
		Policy: p, Seats: seats, Rand: seeded(seed), Sink: out.sink,
		Run: 1, Jobs: jobs, Prompt: "scratch prompt", MaxTokens: 256,
	})
	require.NoError(t, err)
	return l
}

// virtual runs jobs one after another on the virtual clock from t0.
func virtual(t testing.TB, p Policy, jobs int, seed uint64, seats ...SeatSpec) (rows, Result) {
	t.Helper()
	var out rows
	res, err := newLoop(t, p, jobs, seed, &out, seats...).RunVirtual(VirtualOptions{Jobs: jobs, Start: t0})
	require.NoError(t, err)
	return out, res
}

// golden compares got with testdata/golden/rehearse/name, rewriting it
// when RETRYGATE_UPDATE_GOLDEN is set.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("..", "testdata", "golden", "rehearse", name)
	if os.Getenv("RETRYGATE_UPDATE_GOLDEN") != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run with RETRYGATE_UPDATE_GOLDEN=1")
	if !bytes.Equal(want, []byte(got)) {
		require.Equal(t, string(want), got, "golden %s differs; run with RETRYGATE_UPDATE_GOLDEN=1 if the change is intended", name)
	}
}

// decisions lists each row as "job attempt seat outcome decision end".
func (r rows) byJob(job string) rows {
	var out rows
	for _, x := range r {
		if x.Job == job {
			out = append(out, x)
		}
	}
	return out
}
