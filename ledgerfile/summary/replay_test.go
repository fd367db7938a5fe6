package summary

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"retrygate/admit"
	"retrygate/ledgerfile"
)

func TestReplay(t *testing.T) {
	b := admit.Budget{Deadline: 20 * time.Second, TokenCeiling: 8000, MaxAttempts: 2, MaxWait: 5 * time.Second}
	f, err := os.Open("../../testdata/logs/mixed.log")
	require.NoError(t, err)
	defer f.Close()
	p := NewReplayer(b, admit.RetryPolicy{TimeoutsRetried: 1})
	var changed []string
	_, _, err = Scan(f, "mixed.log", false, func(r *ledgerfile.Row) {
		res := p.Add(r, "mixed.log")
		if res.Changed() {
			changed = append(changed, r.Job+":"+res.Now)
		}
		if r.Job == "b" && r.Attempt == 2 {
			assert.Equal(t, 25*time.Second, res.Spent.Time, "b1's elapsed + delay")
			assert.Equal(t, int64(900), res.Spent.Tokens)
			assert.Equal(t, 1, res.Spent.Attempts)
		}
		if r.Job == "d" && r.Attempt == 2 {
			// d1, a slow 500, returned no content after 12 s: a repeat
			// takes 12 s, and 20 − 12 = 8 s are left.
			assert.Equal(t, "refuse: deadline", res.Now)
		}
	})
	require.NoError(t, err)
	// b2: 25 s spent + 0.5 s backoff is past the 20 s deadline; d1 and f1
	// waited past the 5 s wait cap, which cuts an attempt live. b1 and e1
	// were admitted on what was known before them (nothing): their
	// overruns are deadline misses, not flipped decisions.
	assert.Equal(t, []string{"b:refuse: deadline", "d:refuse: queue wait", "f:refuse: queue wait"}, changed)

	// A job-less row replays from the spend it recorded.
	var r ledgerfile.Row
	require.NoError(t, ledgerfile.ParseLine([]byte(`wait_s=18 elapsed_s=9 tokens=2400 spent_s=7.2 spent_tokens=2100 used=1 decision="refuse: queue wait"`), &r))
	res := NewReplayer(admit.Budget{Deadline: 45 * time.Second, TokenCeiling: 8000, MaxAttempts: 1, MaxWait: 30 * time.Second}, admit.RetryPolicy{}).Add(&r, "x")
	assert.Equal(t, "refuse: attempt cap", res.Now)
	assert.False(t, res.Changed())

	// The retry rules' refusals are not the budget's to overturn.
	require.NoError(t, ledgerfile.ParseLine([]byte(`wait_s=1 elapsed_s=1 tokens=1 decision="refuse: permanent error" sent=false`), &r))
	res = NewReplayer(b, admit.RetryPolicy{TimeoutsRetried: 1}).Add(&r, "x")
	assert.Equal(t, "refuse: permanent error", res.Now)
	assert.False(t, res.Changed())
}
