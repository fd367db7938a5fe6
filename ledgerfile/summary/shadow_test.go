package summary

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// On a shadow proxy's rows, check says what enforcing would change: the
// refusals by reason (a refused failure's tokens are retry tax saved, a
// refused success an answer lost), the retries and failovers it would
// add (each as large as the attempt it repeats), and the jobs that ran
// past the deadline passed through. A log without would= has no shadow
// figures.
func TestCheckShadow(t *testing.T) {
	log := strings.Join([]string{
		"job=a attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=100 outcome=server_error spent_s=0 spent_tokens=0 used=0 decision=admit would=retry",
		"job=a attempt=2 seat=s wait_s=1 elapsed_s=2 tokens=150 outcome=server_error spent_s=2 spent_tokens=100 used=1 decision=admit would=fallback",
		"job=a attempt=3 seat=s wait_s=1 elapsed_s=2 tokens=70 outcome=server_error spent_s=4 spent_tokens=250 used=2 decision=admit would=\"refuse: attempt cap\"",
		"job=a attempt=4 seat=s wait_s=1 elapsed_s=2 tokens=90 outcome=ok spent_s=6 spent_tokens=320 used=3 decision=admit would=\"refuse: attempt cap\"",
		"job=b attempt=1 seat=s wait_s=1 elapsed_s=12 tokens=40 outcome=ok spent_s=0 spent_tokens=0 used=0 decision=admit would=admit",
		"job=c attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=40 outcome=ok spent_s=0 spent_tokens=0 used=0 decision=admit would=\"refuse: deadline\"",
		"job=d attempt=1 seat=s wait_s=1 elapsed_s=2 tokens=5 outcome=ok decision=admit",
	}, "\n") + "\n"
	rows, _, err := ledgerfile.ReadAll(strings.NewReader(log), "shadow.log")
	require.NoError(t, err)
	th, err := admit.ParseThreshold("attempts_per_success", "< 5")
	require.NoError(t, err)
	c, err := NewCheck(CheckOptions{Budget: admit.Budget{Deadline: 10 * time.Second, TokenCeiling: 100_000, MaxAttempts: 3, MaxWait: 5 * time.Second},
		Thresholds: []Threshold{{Threshold: th}}})
	require.NoError(t, err)
	for i := range rows {
		c.Add(&rows[i], "shadow.log")
	}
	s := c.Close().Shadow
	require.NotNil(t, s)
	assert.Equal(t, Shadow{Rows: 6, Changed: 5, Refused: []ReasonCount{{"attempt cap", 2}, {"deadline", 1}}, RefusedAll: 3, Retried: 1, FailedOver: 1,
		TaxSavedTokens: 70, TaxAddedTokens: 250, AnswersLost: 2, PastDeadline: 1, DeadlineRefused: 1}, *s)

	c, err = NewCheck(CheckOptions{Budget: admit.Budget{Deadline: 10 * time.Second, TokenCeiling: 100_000, MaxAttempts: 3, MaxWait: 5 * time.Second},
		Thresholds: []Threshold{{Threshold: th}}})
	require.NoError(t, err)
	c.Add(&rows[6], "shadow.log")
	assert.Nil(t, c.Close().Shadow, "an enforcing log")
}
