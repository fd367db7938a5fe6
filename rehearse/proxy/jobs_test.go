package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// A client cannot name its job p<run>-<k>, the proxy's own id for a
// request naming none: such a job would have its books replaced by an
// unnamed request's, get its attempt cap again, and share (job, attempt)
// rows with it. Each (job, attempt) is one row.
func TestNamedJobsNeverTakeTheProxysIDs(t *testing.T) {
	base, _ := upstreamAt(t, seatserver.OpenAI, seat.Plan{Status: 500, Elapsed: 5 * ms})
	pol := testPolicy()
	pol.Breaker.FailureRate = 0                                      // each job's own failures only
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", base)}) // run 7, max_attempts 2
	sent := 0
	for i := range 6 {
		kv := []string{headerJob, "p7-1"}
		if i%2 == 1 {
			kv = nil // an unnamed request: the proxy names it p7-<k>
		}
		resp, body := post(t, px.url+"/v1/chat/completions", chatBody, kv...)
		if i%2 == 0 {
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			assert.Equal(t, "invalid_job", resp.Header.Get("X-Retrygate-Refused"))
		}
		if resp.StatusCode == http.StatusInternalServerError {
			sent++
		}
	}
	for _, k := range []string{headerIdem, headerJob} {
		resp, _ := post(t, px.url+"/v1/chat/completions", chatBody, k, "p12-0003")
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, k)
	}
	resp, _ := post(t, px.url+"/v1/chat/completions", chatBody, headerJob, "p7-1x")
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode, "another name is a job's")
	// A rehearsal pointed at the proxy names its jobs r<run>-<k> in
	// Idempotency-Key: those are named jobs like any other.
	resp, _ = post(t, px.url+"/v1/chat/completions", chatBody, headerIdem, "r7-1")
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode, "a rehearsal's job id is a job's")
	px.stop()
	seen := map[string]bool{}
	for _, r := range px.rows.all() {
		k := fmt.Sprintf("%s/%d", r.Job, r.Attempt)
		require.False(t, seen[k], "two rows for (job, attempt) %s", k)
		seen[k] = true
	}
	assert.Equal(t, 3, sent, "the three unnamed requests, each a job of its own")
	assert.True(t, seen["r7-1/1"], "the rehearsal's job has its row")
}

func TestIsOwnID(t *testing.T) {
	for id, want := range map[string]bool{
		"p7-1": true, "p12-0003": true, "p0-0": true, ownID(3, 41): true,
		"p7-1x": false, "p-1": false, "p7-": false, "P7-1": false, "p7_1": false, "pp7-1": false, "p7-1-2": false, "order-1": false,
		"r7-1": false, "p+7-1": false, "p 7-1": false,
	} {
		assert.Equal(t, want, isOwnID(id), id)
	}
}

// jobRequest serves one generation request of job id from client in
// process (no socket: the table, not the network, is under test).
func jobRequest(px *Proxy, client, id string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "http://proxy/v1/chat/completions", strings.NewReader(chatBody))
	r.RemoteAddr = client + ":40000"
	if id != "" {
		r.Header.Set(headerJob, id)
	}
	w := httptest.NewRecorder()
	px.ServeHTTP(w, r)
	return w
}

// tableSize is the job table of TestOneClientCannotFillTheJobTable:
// small by default; RETRYGATE_PROXY_TABLE=100000 runs it full size.
func tableSize(t *testing.T) int {
	if v := os.Getenv("RETRYGATE_PROXY_TABLE"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	return 400
}

// As many distinct job ids as the table holds, from one client, do not
// lock another client's new job out: the client gets its share
// (MaxClientJobs, a quarter by default), then 429 with Retry-After in the
// provider's shape, each a row of its own (refuse: proxy busy). Its jobs leave at their
// deadline plus the retention, and it may open new ones again.
func TestOneClientCannotFillTheJobTable(t *testing.T) {
	n := tableSize(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, chatAnswer)
	}))
	t.Cleanup(up.Close)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", up.URL+"/v1")}, func(o *Options) {
		o.MaxJobs, o.Retention = n, time.Minute
	})
	share := n / 4
	t0 := time.Now()
	var refused []*httptest.ResponseRecorder
	var t1 time.Time
	for k := range n {
		if k == share {
			t1 = time.Now()
		}
		w := jobRequest(px.px, "10.0.0.1", fmt.Sprintf("flood-%d", k))
		if k < share {
			require.Equal(t, http.StatusOK, w.Code, "job %d: %s", k, w.Body)
			continue
		}
		require.Equal(t, http.StatusTooManyRequests, w.Code, "job %d", k)
		refused = append(refused, w)
	}
	t.Logf("%d job ids from one client in %s: %d admitted, %d refused in %s", n, time.Since(t0), share, len(refused), time.Since(t1))
	w := refused[0]
	assert.Equal(t, "client_jobs", w.Header().Get("X-Retrygate-Refused"))
	ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
	require.NoError(t, err)
	// Until the client's first job is forgotten: its 10 s deadline, then
	// the minute's retention, from its start (t0) to this refusal (t1).
	left := 70 - t1.Sub(t0).Seconds()
	assert.InDelta(t, left, ra, 2, "Retry-After %d", ra)
	var shape struct {
		Error struct{ Message, Type, Code string }
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &shape))
	assert.Equal(t, "client_jobs", shape.Error.Code)

	other := jobRequest(px.px, "10.0.0.2", "another-client's-job")
	assert.Equal(t, http.StatusOK, other.Code, other.Body.String())
	unnamed := jobRequest(px.px, "10.0.0.1", "")
	assert.Equal(t, http.StatusOK, unnamed.Code, "an unnamed request is no job of the table's: it leaves as it ends")

	// Past the deadline and the retention, the jobs leave the table.
	px.clock.Advance(10*time.Second + time.Minute)
	px.px.Sweep()
	assert.Equal(t, http.StatusOK, jobRequest(px.px, "10.0.0.1", "later").Code)
	px.stop()
	rows := px.rows.all()
	assert.Equal(t, share+2+n-share+1, len(rows), "a row for each request, refusals included")
	var busy []ledgerfile.Row
	for _, r := range rows {
		if r.Decision == "refuse: proxy busy" {
			busy = append(busy, r)
		}
	}
	require.Len(t, busy, n-share)
	assert.False(t, busy[0].WasSent())
	assert.Contains(t, ledgerfile.FormatRow(&busy[0]), "refused=client_jobs for_job=flood-"+strconv.Itoa(share))
	assert.True(t, isOwnID(busy[0].Job), "the refusal is a job of its own, not the named job's: %s", busy[0].Job)
}

// The table as a whole stays bounded by MaxJobs: as many clients as it
// holds, each with one job, fill it; then a new job gets 503 busy (with
// Retry-After, a row), since nobody holds more than its newcomer would,
// while a request of a job already open is served.
func TestJobTableBound(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, chatAnswer)
	}))
	t.Cleanup(up.Close)
	px := start(t, testPolicy(), []seat.Config{seatCfg("s", "openai", up.URL+"/v1")}, func(o *Options) {
		o.MaxJobs, o.MaxClientJobs = 8, 2
	})
	for c := range 8 {
		require.Equal(t, http.StatusOK, jobRequest(px.px, fmt.Sprintf("10.0.1.%d", c), fmt.Sprintf("j-%d", c)).Code)
	}
	w := jobRequest(px.px, "10.0.2.1", "one-too-many")
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "busy", w.Header().Get("X-Retrygate-Refused"))
	assert.NotEmpty(t, w.Header().Get("Retry-After"))
	assert.Equal(t, http.StatusOK, jobRequest(px.px, "10.0.2.1", "j-0").Code, "an open job's next attempt")
	w = jobRequest(px.px, "10.0.1.0", "its-second")
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "a client holding as many as any other, in a full table")
	assert.Equal(t, "client_jobs", w.Header().Get("X-Retrygate-Refused"))
}

// A job forgotten at its deadline plus the retention is not started
// again under its name: its attempt 1 would be a second row for (job, 1)
// in the log, which report and check refuse. A request naming it gets
// what a job forgotten early gets, 410 job_forgotten with a row of its
// own, and the log reads, sums and replays.
func TestJobNamedAgainAfterRetention(t *testing.T) {
	pol := testPolicy()
	px := start(t, pol, []seat.Config{seatCfg("s", "openai", chatUpstream(t)+"/v1")}, func(o *Options) {
		o.Retention = time.Minute
	})
	p := px.px
	require.Equal(t, http.StatusOK, jobRequest(p, "10.0.0.1", "late").Code)
	require.Equal(t, http.StatusOK, jobRequest(p, "10.0.0.1", "kept").Code)
	px.clock.Advance(pol.Budget.Deadline + time.Minute - time.Second)
	w := jobRequest(p, "10.0.0.1", "kept")
	assert.Equal(t, http.StatusGatewayTimeout, w.Code, "within its retention, the job as it was: %s", w.Body)
	px.clock.Advance(time.Second)
	p.Sweep()
	p.mu.Lock()
	assert.Empty(t, p.jobs, "both forgotten at their deadline plus the retention")
	p.mu.Unlock()
	w = jobRequest(p, "10.0.0.2", "late")
	assert.Equal(t, http.StatusGone, w.Code, w.Body.String())
	assert.Equal(t, "job_forgotten", w.Header().Get("X-Retrygate-Refused"))
	assert.Equal(t, "false", w.Header().Get("X-Should-Retry"))
	assert.Contains(t, w.Body.String(), "--job-retention")
	assert.Equal(t, http.StatusGone, jobRequest(p, "10.0.0.1", "kept").Code)
	assert.Equal(t, http.StatusOK, jobRequest(p, "10.0.0.1", "new").Code, "a new name is a new job")
	px.stop()

	rs := px.rows.all()
	seen := map[string]bool{}
	for _, r := range rs {
		k := fmt.Sprintf("%s/%d", r.Job, r.Attempt)
		assert.False(t, seen[k], "two rows for (job, attempt) %s", k)
		seen[k] = true
	}
	var gone []ledgerfile.Row
	for _, r := range rs {
		if extra(r, KeyRefused) == "job_forgotten" {
			gone = append(gone, r)
		}
	}
	require.Len(t, gone, 2)
	assert.True(t, isOwnID(gone[0].Job), "the refusal is a job of its own: %s", gone[0].Job)
	assert.Equal(t, "late", extra(gone[0], KeyForJob))
	assert.Equal(t, "refuse: proxy busy", gone[0].Decision)

	all := readAsReport(t, pol, px.rows.text())
	assert.EqualValues(t, 2, all.Refusals[string(admit.ReasonProxyBusy)], "the two 410s")
	assert.EqualValues(t, 3, all.Refused, "the two 410s and the 504")
}
