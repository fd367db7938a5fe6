package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// fakeBooks is store.Books in memory, one lock for every key: the
// shared path without a database.
type fakeBooks struct {
	mu   sync.Mutex
	now  func() time.Time
	recs map[string]store.Record
	rows rows
}

func (f *fakeBooks) Book(_ context.Context, key string, fn func([]byte, time.Time) (store.Record, []ledgerfile.Row, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	old, ok := f.recs[key]
	var data []byte
	if ok {
		data = slices.Clone(old.Data)
	}
	rec, rs, err := fn(data, f.now())
	if err != nil {
		return err
	}
	if rec.Data == nil {
		delete(f.recs, key)
	} else {
		f.recs[key] = rec
	}
	return f.rows.add(rs)
}

func (f *fakeBooks) Due(_ context.Context, n int) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k, r := range f.recs {
		if !r.Due.After(f.now()) && len(keys) < n {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// A proxy that dies mid-attempt leaves its attempt in the job's shared
// book: past its hard timeout and grace the next proxy writes its row
// (a timeout: its outcome is unknown), so it is still counted as used,
// the job's other proxy sends one more attempt under a cap of two, not
// two more, and a replay of the rows changes no decision.
func TestSharedBooksLostAttemptStillCounts(t *testing.T) {
	pol := testPolicy() // max_attempts 2, hard 5s
	pol.Budget.Deadline = 10 * time.Minute
	base, srv := upstreamAt(t, seatserver.OpenAI, okPlan)
	clk := &clock{}
	fb := &fakeBooks{now: clk.Now, recs: map[string]store.Record{}}
	chain := []seat.Config{seatCfg("s", "openai", base)}
	dying, err := New(Options{Policy: pol, Chain: chain, Books: fb, Now: clk.Now})
	require.NoError(t, err)
	t.Cleanup(dying.Close)
	admitThenDie(t, dying, "lost-job")

	other := start(t, pol, chain, func(o *Options) { o.Books, o.Now = fb, clk.Now })
	clk.Advance(pol.Timeouts.Hard + flightGrace + time.Second)
	resp, _ := post(t, other.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "lost-job")
	assert.Equal(t, 200, resp.StatusCode)
	resp, body := post(t, other.url+"/v1/chat/completions", sharedBody, "X-Retrygate-Job", "lost-job")
	assert.Equal(t, 503, resp.StatusCode)
	assert.Contains(t, body, "refuse: attempt cap for job lost-job: the job used 2 of 2 attempts")
	assert.Equal(t, 1, srv.Total())
	rs := fb.rows.all()
	require.Len(t, rs, 3)
	assert.Equal(t, 1, rs[0].Attempt, "attempt 1 is the lost one: its row is written for it")
	assert.Equal(t, "timeout", string(rs[0].Outcome))
	assert.Contains(t, rs[0].Note, "lost")
	assert.Equal(t, []int{1, 2, 3}, []int{rs[0].Attempt, rs[1].Attempt, rs[2].Attempt})
	assert.Equal(t, 2, rs[2].Used, "the refusal's used is the attempts its decision counted")
	assertReplaysUnchanged(t, pol, rs)
}

// admitThenDie is proxy p deciding a request of the named job id, whose
// book is shared, and admitting it: then the proxy dies before it
// sends, its lease holding the attempt in flight.
func admitThenDie(t *testing.T, p *Proxy, id string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(sharedBody))
	req, ok := parseRequest([]byte(sharedBody))
	require.True(t, ok)
	in := &admitted{body: []byte(sharedBody), req: req, id: id, named: true}
	c := p.newCall(httptest.NewRecorder(), r, in)
	require.NotNil(t, c.sh, "a shared book")
	plan, ok := c.before()
	require.True(t, ok)
	require.True(t, plan.Decision.Admit, "admitted, then the proxy dies before sending")
}
