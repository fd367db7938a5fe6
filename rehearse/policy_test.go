package rehearse

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRehearsePolicyValidate(t *testing.T) {
	require.NoError(t, DefaultPolicy().Validate())
	tests := []struct {
		edit func(*Policy)
		want string
	}{
		{func(p *Policy) { p.Retry.BaseDelay = -time.Second }, "retry.base_delay: must not be negative"},
		{func(p *Policy) { p.Retry.MaxDelay = time.Millisecond }, "retry.max_delay: 1ms is below retry.base_delay 500ms"},
		{func(p *Policy) { p.Retry.SlowServerAfter = -1 }, "retry.slow_5xx_after: must not be negative"},
		{func(p *Policy) { p.Retry.TimeoutsRetried = -1 }, "retry.timeouts_retried: must not be negative"},
		{func(p *Policy) { p.Timeouts.Hard = 0 }, "timeouts.hard: must be positive"},
		{func(p *Policy) { p.Timeouts.Soft = -time.Second }, "timeouts.soft: must not be negative"},
		{func(p *Policy) { p.Timeouts.Soft = time.Minute }, "timeouts.soft: 1m0s is past timeouts.hard 25s"},
		{func(p *Policy) { p.Breaker.FailureRate = 1.5 }, "breaker.failure_rate: must be between 0 and 1, got 1.5"},
		{func(p *Policy) { p.Budget.MaxWait = 0 }, "budget.max_wait: must be positive"},
	}
	for _, tt := range tests {
		p := DefaultPolicy()
		tt.edit(&p)
		err := p.Validate()
		if assert.Error(t, err, tt.want) {
			assert.Contains(t, err.Error(), tt.want)
		}
	}
}
