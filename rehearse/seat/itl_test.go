package seat

import (
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// itlGapsMs are the planned gaps between the text chunks of itlHandler's
// stream: mean 25 ms, max 40 ms.
var itlGapsMs = []int{20, 40, 20, 20}

// itlHandler streams text chunks itlGapsMs apart in one wire format, with
// content-free frames between them (they are not chunks for ITL), one
// multi-token chunk (one chunk, whatever its tokens), and a usage frame
// 60 ms after the last text. It records when each text chunk was flushed.
func itlHandler(kind string, sent *[]time.Time, mu *sync.Mutex) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ct := "text/event-stream"
		if kind == "ollama" {
			ct = "application/x-ndjson"
		}
		sw := startStream(w, ct)
		text := func(s string) {
			if kind == "ollama" {
				sw.line(olText(s))
			} else {
				sw.data(oaText(s))
			}
			mu.Lock()
			*sent = append(*sent, time.Now())
			mu.Unlock()
		}
		empty := func() {
			if kind == "ollama" {
				sw.line(olText(""))
			} else {
				sw.data(oaDelta(`{"role":"assistant","content":""}`))
			}
		}
		t0 := time.Now()
		empty()
		sleepUntil(t0, 10*time.Millisecond)
		text("Hello")
		at := 10 * time.Millisecond
		for i, g := range itlGapsMs {
			at += time.Duration(g) * time.Millisecond
			sleepUntil(t0, at-5*time.Millisecond)
			empty() // no text: not a chunk for ITL
			sleepUntil(t0, at)
			if i == 1 {
				text(" there, my good friend") // several tokens, one chunk
			} else {
				text(" x")
			}
		}
		sleepUntil(t0, at+60*time.Millisecond)
		if kind == "ollama" {
			sw.line(`{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":12,"eval_count":9}`)
		} else {
			sw.data(oaUsage(12, 9))
			sw.raw("data: [DONE]\n\n")
		}
	}
}

// TestITL: against a loopback stream whose text chunks are flushed 20–40
// ms apart, the seat's ITL mean and max match the gaps the server
// actually flushed within 1 ms per gap, for SSE and NDJSON. Frames
// without text and the trailing usage frame do not count. On a loaded
// machine a read can wake late now and then, so each kind gets up to
// three tries and must land once; a systematic error fails all three.
func TestITL(t *testing.T) {
	const tol = time.Millisecond
	for _, kind := range []string{"openai", "ollama"} {
		t.Run(kind, func(t *testing.T) {
			var mu sync.Mutex
			var sent []time.Time
			srv := loopback(t, itlHandler(kind, &sent, &mu))
			s := newTestSeat(t, kind, srv.URL)
			var errMean, errMax, serverMax time.Duration
			for try := 1; try <= 3; try++ {
				mu.Lock()
				sent = sent[:0]
				mu.Unlock()
				obs := do(t, s, 5*time.Second, Request{MaxTokens: 16})
				require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
				require.True(t, obs.HasITL)
				mu.Lock()
				require.Len(t, sent, len(itlGapsMs)+1)
				var sum, most time.Duration
				for i := 1; i < len(sent); i++ {
					g := sent[i].Sub(sent[i-1])
					sum += g
					most = max(most, g)
				}
				mu.Unlock()
				mean := sum / time.Duration(len(itlGapsMs))
				errMean, errMax = (obs.ITLMean - mean).Abs(), (obs.ITLMax - most).Abs()
				t.Logf("ITL %s try %d: mean %v (server %v, error %v), max %v (server %v, error %v)",
					kind, try, obs.ITLMean, mean, errMean, obs.ITLMax, most, errMax)
				// The usage frame 60 ms after the last text is not a gap:
				// counted, it would be the max, 20 ms past the server's
				// longest text gap. A try where the server itself woke
				// late (its own gap near 60 ms) cannot tell them apart.
				serverMax = most
				if most < 55*time.Millisecond && errMean <= tol && errMax <= tol {
					break
				}
			}
			require.Less(t, serverMax, 55*time.Millisecond, "the server flushed its text on time in one try at least")
			require.LessOrEqual(t, errMean, tol, "ITL mean error")
			require.LessOrEqual(t, errMax, tol, "ITL max error")
		})
	}
}

// TestResolveITL: a plan's ITL is its decode time over completion
// tokens − 1, for a whole stream and for one cut mid-way; a single token
// has none.
func TestResolveITL(t *testing.T) {
	p := Plan{Wait: 100 * time.Millisecond, Elapsed: 500 * time.Millisecond, CompletionTokens: 21}
	o := Resolve(p, 0, 0, 0)
	require.True(t, o.HasITL)
	require.Equal(t, 20*time.Millisecond, o.ITLMean)
	require.Equal(t, 20*time.Millisecond, o.ITLMax)

	cut := Resolve(p, 300*time.Millisecond, 0, 0)
	require.Equal(t, admit.Timeout, cut.Outcome)
	require.True(t, cut.HasITL)
	require.Equal(t, 20*time.Millisecond, cut.ITLMean)

	early := Resolve(p, 110*time.Millisecond, 0, 0) // one chunk so far
	require.False(t, early.HasITL)

	p.CompletionTokens = 1
	require.False(t, Resolve(p, 0, 0, 0).HasITL)
}

// TestITLGapsNoAlloc: counting a chunk allocates nothing.
func TestITLGapsNoAlloc(t *testing.T) {
	var g itlGaps
	n := testing.AllocsPerRun(100, func() { g.chunk(time.Duration(g.chunks) * time.Millisecond) })
	require.Zero(t, n)
	mean, most, ok := g.figures()
	require.True(t, ok)
	require.Equal(t, time.Millisecond, mean)
	require.Equal(t, time.Millisecond, most)
}

// TestExecITL: a command seat's chunks are its stdout writes; three
// writes at least 60 ms apart give a mean gap of at least that, and at
// most half the attempt (sleep(1) starts a process, so a loaded machine
// stretches the gaps: the exact chunk timing is TestITL's).
func TestExecITL(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("uses sh")
	}
	s := execSeatFor(t, "cat >/dev/null; printf a; sleep 0.06; printf b; sleep 0.06; printf c")
	obs := do(t, s, 5*time.Second, Request{MaxTokens: 16})
	require.Equal(t, admit.OK, obs.Outcome, obs.Detail)
	require.True(t, obs.HasITL)
	t.Logf("exec ITL mean %v max %v", obs.ITLMean, obs.ITLMax)
	require.GreaterOrEqual(t, obs.ITLMean, 55*time.Millisecond)
	require.GreaterOrEqual(t, obs.ITLMax, obs.ITLMean)
	// Two gaps inside the attempt: their mean is at most half of it, on
	// any machine (a gap counted from the submit would not be).
	require.LessOrEqual(t, obs.ITLMean, obs.Elapsed/2)

	one := do(t, execSeatFor(t, "cat >/dev/null; printf once"), 5*time.Second, Request{MaxTokens: 16})
	require.False(t, one.HasITL, "one chunk: no gap")
}
