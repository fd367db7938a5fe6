package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse"
)

// KeyRefused is the row key of a request the proxy refused before any
// job's books (a limit, a malformed request): the answer's
// X-Retrygate-Refused code. KeyForJob is the job the request named, on
// such a row (the row is a job of its own: see refuse).
const (
	KeyRefused = "refused"
	KeyForJob  = "for_job"
)

// bodyWait is how long a request waits for room in the body budget
// before it is refused 503 (it holds a request slot, but no body, while
// it waits: the body is still in the client's socket).
var bodyWait = time.Second

// bodyBudget bounds the bytes of request bodies being read or held at
// once (Options.MaxBodyTotal): a request takes its declared length (an
// undeclared one, MaxBody) before a byte of its body is read, and gives
// it back when its handler returns.
type bodyBudget struct {
	sem   *semaphore.Weighted
	total int64
	held  atomic.Int64 // bytes taken now
	peak  atomic.Int64 // the most ever taken at once
}

func newBodyBudget(total int64) *bodyBudget {
	return &bodyBudget{sem: semaphore.NewWeighted(total), total: total}
}

// take waits up to bodyWait (or until ctx ends) for n bytes of the
// budget; false when they did not come.
func (b *bodyBudget) take(ctx context.Context, n int64) bool {
	if n <= 0 {
		return true
	}
	if !b.sem.TryAcquire(n) {
		ctx, cancel := context.WithTimeout(ctx, bodyWait)
		defer cancel()
		if b.sem.Acquire(ctx, n) != nil {
			return false
		}
	}
	held := b.held.Add(n)
	for p := b.peak.Load(); held > p && !b.peak.CompareAndSwap(p, held); p = b.peak.Load() {
	}
	return true
}

// give returns n bytes taken.
func (b *bodyBudget) give(n int64) {
	if n > 0 {
		b.held.Add(-n)
		b.sem.Release(n)
	}
}

// refuse answers r with ref, a refusal made before any job's books were
// read (a limit, a malformed request), and writes its row. The row is a
// job of its own, under the proxy's own id (as a request naming no job),
// whatever job the request named: the request never reached that job's
// books, so its attempt numbers and budget are untouched, and the name
// is kept as for_job. It is one attempt, not sent, decision
// "refuse: <ref.reason>", job_end failed, refused=<ref.code> (the
// answer's X-Retrygate-Refused), the flag or fault in its note, and the
// client's retry counter as client_retry.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, ref refusal) {
	ref.write(w, p.kind)
	u := &p.seats[0]
	p.mu.Lock()
	id := p.nextOwnID()
	now := p.opts.Now()
	p.mu.Unlock()
	b := rehearse.RowBase{TS: now, Job: id, Attempt: 1, Seat: u.cfg.Name, Model: u.cfg.Model}
	var row ledgerfile.Row
	rehearse.RefusalRow(&row, &b, &admit.Track{}, admit.Refuse(ref.reason))
	row.JobEnd = ledgerfile.JobFailed
	row.Note = fmt.Sprintf("answered %d: %s", ref.status, strings.TrimPrefix(ref.message, "retrygate: "))
	row.Extra = append(row.Extra, ledgerfile.KV{Key: KeyRefused, Value: ref.code})
	if name, named, bad := jobName(r.Header); named && bad == "" {
		row.Extra = append(row.Extra, ledgerfile.KV{Key: KeyForJob, Value: name})
	}
	out := rowOut{}
	out.add(&row, retryCount(r.Header))
	p.emit(out.rows)
}

// nextOwnID numbers the proxy's next own job (ownID), under p.mu.
func (p *Proxy) nextOwnID() string {
	p.k++
	return ownID(p.opts.Run, p.k)
}
