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

// Routes are checked in order, the first whose pattern (an exact name or
// a glob) matches wins, and a model no route takes runs the policy's
// own fallback.
func TestPolicyChainFor(t *testing.T) {
	p := DefaultPolicy()
	p.Fallback = []string{"def"}
	p.Routes = []Route{
		{Model: "gpt-4o", Fallback: []string{"exact"}},
		{Model: "gpt-*", Fallback: []string{"glob", "spare"}},
		{Model: "gpt-4o-mini", Fallback: []string{"never"}}, // shadowed by gpt-*
	}
	require.NoError(t, p.Validate())
	for model, want := range map[string][]string{
		"gpt-4o":       {"exact"},
		"gpt-4o-mini":  {"glob", "spare"},
		"gpt-":         {"glob", "spare"},
		"claude-3":     {"def"},
		"":             {"def"},
		"org/gpt-4o":   {"def"}, // a glob's * never crosses a slash (path.Match)
		"GPT-4o":       {"def"}, // model names are matched as written
		"gpt-4o-extra": {"glob", "spare"},
	} {
		assert.Equal(t, want, p.ChainFor(model), model)
		_, routed := p.Route(model)
		assert.Equal(t, want[0] != "def", routed, model)
	}
}

func TestPolicyRoutesValidate(t *testing.T) {
	for _, tt := range []struct {
		r    Route
		want string
	}{
		{Route{Model: "gpt-[", Fallback: []string{"a"}}, `routes: [0].model: "gpt-[" is not a model name or glob`},
		{Route{Model: "", Fallback: []string{"a"}}, `routes: [0].model: "" is not a model name or glob`},
		{Route{Model: "m"}, "routes: [0].fallback: no seat"},
	} {
		p := DefaultPolicy()
		p.Routes = []Route{tt.r}
		err := p.Validate()
		if assert.Error(t, err, tt.want) {
			assert.Equal(t, tt.want, err.Error())
		}
	}
}
