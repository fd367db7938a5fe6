package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// A client that hangs up while its attempt waits for the answer cancels
// the upstream request at once (not at the hard timeout), and the row
// says cancelled.
func TestClientHangUpCancelsAttempt(t *testing.T) {
	base, srv := upstreamAt(t, seatserver.OpenAI, seat.Plan{Hang: true, TTFB: time.Hour})
	pol := testPolicy() // hard timeout 5s
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(openaiStream))
	req.Header.Set(headerJob, "gone")
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	require.Eventually(t, func() bool { return len(srv.Requests()) == 1 }, 2*time.Second, 5*ms)
	cancel()
	require.Error(t, <-errc)
	rs := px.rows.wait(t, 1)
	assert.Equal(t, admit.Cancelled, rs[0].Outcome)
	// Well inside the 5s hard timeout: the hang-up ended it.
	require.Eventually(t, func() bool { return srv.Requests()[0].State != seatserver.StateInFlight }, 2*time.Second, 5*ms,
		"the upstream request was cancelled")

	// The client may come back under the same job: its next request is
	// judged on the books, and a replay of the log judges it the same.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*ms)
	defer cancel2()
	req2, _ := http.NewRequestWithContext(ctx2, http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(openaiStream))
	req2.Header.Set(headerJob, "gone")
	if resp, err := http.DefaultClient.Do(req2); err == nil {
		resp.Body.Close()
	}
	rs = px.rows.wait(t, 2)
	assert.Equal(t, "admit", rs[1].Decision, "the job's second attempt is sent")
	px.stop()
	assertReplaysUnchanged(t, pol, px.rows.all())
}

// An error status is an attempt that failed with that status even when
// the client hangs up before its body: the body is read to its end and
// the row is the upstream's error, not a cancellation; and nothing more
// is sent for a client that is gone (the proxy would retry a 503).
func TestHangUpDuringErrorBodyKeepsStatus(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hungUp := &eofListener{Listener: listen(t), eof: make(chan struct{})}
	headers := make(chan struct{}, 1)
	var calls atomic.Int32
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		http.NewResponseController(w).Flush()
		<-hungUp.eof // the body comes once the proxy has seen the client leave
		_, _ = io.WriteString(w, `{"error":{"message":"overloaded","type":"server_error","code":"overloaded"}}`)
	})}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })
	px := startOn(t, hungUp, testPolicy(), []seat.Config{seatCfg("s", "openai", "http://"+ln.Addr().String()+"/v1")})
	// The proxy has the answer's headers once the seat reads its body.
	px.px.seats[0].rt = bodyRead{px.px.seats[0].rt, headers}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(openaiStream))
	req.Header.Set(headerJob, "err")
	go func() {
		<-headers
		cancel() // hang up before the body (nothing was sent to the client yet)
	}()
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err)
	rs := px.rows.wait(t, 1)
	assert.Equal(t, admit.ServerError, rs[0].Outcome)
	assert.Equal(t, 503, rs[0].HTTPStatus)
	px.stop()
	assert.Len(t, px.rows.all(), 1, "no retry for a client that left")
	assert.EqualValues(t, 1, calls.Load())
}

// bodyRead is a RoundTripper that says when an answer's body is first read.
type bodyRead struct {
	http.RoundTripper
	read chan struct{}
}

func (b bodyRead) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.RoundTripper.RoundTrip(r)
	if err == nil {
		resp.Body = &firstRead{ReadCloser: resp.Body, read: b.read}
	}
	return resp, err
}

type firstRead struct {
	io.ReadCloser
	read chan struct{}
	once sync.Once
}

func (f *firstRead) Read(p []byte) (int, error) {
	f.once.Do(func() { f.read <- struct{}{} })
	return f.ReadCloser.Read(p)
}
