package proxy

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"retrygate/ledgerfile"
	"retrygate/ledgerfile/summary"
	"retrygate/rehearse"
)

// changedDecisions replays rows, in order, under pol with the replay
// `check --policy` runs (summary.Replayer) and lists the rows whose
// decision flips.
func changedDecisions(pol rehearse.Policy, rows []ledgerfile.Row) []string {
	rp := summary.NewReplayer(pol.Budget, pol.Retry)
	var out []string
	for i := range rows {
		r := rows[i]
		if got := rp.Add(&r, "log"); got.Changed() {
			out = append(out, ledgerfile.FormatRow(&rows[i])+"  => now "+got.Now)
		}
	}
	return out
}

func assertReplaysUnchanged(t testing.TB, pol rehearse.Policy, rows []ledgerfile.Row) {
	t.Helper()
	assert.Empty(t, changedDecisions(pol, rows), "decisions that change on a replay under the policy that wrote them")
}
