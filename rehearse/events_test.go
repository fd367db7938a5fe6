package rehearse

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

// On the real clock too, the breaker's opening is an event the loop hands
// to Config.Events, timed by the driver's clock, and no row's note.
func TestBreakerEventsOnTheRealClock(t *testing.T) {
	p := DefaultPolicy()
	p.Breaker = admit.BreakerConfig{Window: time.Hour, FailureRate: 0.5, MinRequests: 2, Cooldown: time.Hour, HalfOpenProbes: 1}
	var (
		mu     sync.Mutex
		events []ledgerfile.Event
		out    syncRows
	)
	l, err := New(Config{Policy: p, Seats: []SeatSpec{spec("down", plans{{ConnError: true}})}, Rand: seeded(1),
		Sink: out.sink, Events: func(e *ledgerfile.Event) { mu.Lock(); events = append(events, *e); mu.Unlock() },
		Run: 1, Jobs: 3, Prompt: "scratch", MaxTokens: 8})
	require.NoError(t, err)
	before := time.Now()
	_, err = l.RunReal(context.Background(), RealOptions{Jobs: 3, Concurrency: 1})
	require.NoError(t, err)
	after := time.Now()
	require.Len(t, events, 1, "closed → open, and the hour-long cooldown never ends")
	e := events[0]
	assert.Equal(t, ledgerfile.Event{Kind: ledgerfile.EventBreaker, Seat: "down", From: "closed", To: "open", TS: e.TS}, e)
	assert.False(t, e.TS.Before(before.UTC()) || e.TS.After(after.UTC()), "timed on the run's clock: %s", e.TS)
	for _, r := range out.r {
		assert.NotContains(t, r.Note, "breaker")
	}
}
