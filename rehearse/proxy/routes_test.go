package proxy

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// A policy's routes pick each request's chain by the model it names:
// a claude-* request runs b → c (b's fast 500 fails over to c, which
// sends its own model), a gpt request matches no route and runs the
// policy's own chain (a), and no request touches another chain's seats.
func TestRoutesPickTheChainByModel(t *testing.T) {
	ok := seat.Plan{Wait: 5 * ms, Elapsed: 10 * ms, PromptTokens: 12, CompletionTokens: 8}
	abase, asrv := upstreamAt(t, seatserver.OpenAI, ok)
	bbase, bsrv := upstreamAt(t, seatserver.OpenAI, seat.Plan{Status: 500, Elapsed: 2 * ms})
	cbase, _ := upstreamAt(t, seatserver.OpenAI, ok)
	pol := testPolicy()
	pol.Fallback = []string{"a"}
	pol.Routes = []rehearse.Route{{Model: "claude-*", Fallback: []string{"b", "c"}}, {Model: "claude-x", Fallback: []string{"a"}}}
	px := start(t, pol, []seat.Config{seatCfg("a", "openai", abase)}, func(o *Options) {
		o.RouteSeats = []seat.Config{seatCfg("b", "openai", bbase), seatCfg("c", "openai", cbase)}
	})
	for _, c := range []struct{ job, model string }{{"claude", "claude-x"}, {"gpt", "gpt-4o"}} {
		resp, _ := post(t, px.url+"/v1/chat/completions", `{"model":"`+c.model+`","messages":[{"role":"user","content":"hi"}]}`, "X-Retrygate-Job", c.job)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode, c.job)
	}
	px.stop()
	var got []string
	for _, r := range px.rows.all() {
		got = append(got, r.Job+" "+r.Seat+" "+r.Model+" "+string(r.Outcome))
	}
	// the first matching route wins: claude-x is claude-*'s, not the later exact route's
	assert.Equal(t, []string{
		"claude b claude-x " + "server_error",
		"claude c m-c ok",
		"gpt a gpt-4o ok",
	}, got, px.rows.text())
	assert.Equal(t, 1, asrv.Total(), "a serves the gpt request alone")
	assert.Equal(t, 1, bsrv.Total())
}

// A route naming a seat the proxy was not given is refused at New.
func TestRoutesSeatMissing(t *testing.T) {
	pol := testPolicy()
	pol.Routes = []rehearse.Route{{Model: "m", Fallback: []string{"nope"}}}
	_, err := New(Options{Policy: pol, Chain: []seat.Config{seatCfg("a", "openai", "http://127.0.0.1:1/v1")},
		Sink: func([]ledgerfile.Row) error { return nil }})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `routes[0].fallback: seat "nope"`)
}
