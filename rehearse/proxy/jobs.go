package proxy

import (
	"container/heap"
	"fmt"
	"hash/maphash"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// The in-process job table: bounded by Options.MaxJobs in all, and by
// Options.MaxClientJobs for the jobs one client (its address's prefix:
// shares.go) holds, so one client cannot fill it. A named job is held
// from its first request until its deadline plus Options.Retention (a
// late retry continues the job it was); a request naming no job is a job
// only while it runs, outside the table (the request slots bound those).
// Jobs leave in the order they come due, off an expiry heap: each is
// looked at once at its retention's end, never once per request. Every
// request writes its job's end on its last row, so a job leaves without
// a row of its own; its name stays (forgotten), and a later request
// naming it is refused, never the job started again at attempt 1.
//
// A full table is shared fairly: a new job of a client that holds fewer
// jobs than another takes the place of that other client's oldest job no
// request is running, taken from the client holding the most (off a heap
// of clients by jobs held). That job is forgotten early, and a later
// request naming it is refused (forgotten). So a few clients, each within
// its share, cannot fill the table for the rest; a client holding as
// many as any other gets 429.

// job is one logical request between its requests: the job machine, and
// the turn its requests take one at a time (a later request of a named
// job waits for the one before it to end, then continues the job as its
// next client retry).
type job struct {
	id     string
	named  bool
	client string // the client of its first request (clientKey)
	m      admit.Job
	turn   chan struct{} // held by the one request running the job
	users  int           // requests running it or waiting for its turn (under p.mu)
	due    time.Time     // when the expiry heap looks at it next
	at     int           // its index in the expiry heap; -1: not in it
	gone   bool          // forgotten (drop)
}

// indexedHeap is a container/heap that keeps each element's index in it
// (-1 once out), for heap.Fix and heap.Remove: the named in-process jobs
// by when each is next due, and the clients holding jobs, the one
// holding the most first.
type indexedHeap[T interface {
	heapAt() *int
	heapBefore(T) bool
}] []T

func (h indexedHeap[T]) Len() int           { return len(h) }
func (h indexedHeap[T]) Less(a, b int) bool { return h[a].heapBefore(h[b]) }
func (h indexedHeap[T]) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	*h[a].heapAt(), *h[b].heapAt() = a, b
}
func (h *indexedHeap[T]) Push(x any) {
	e := x.(T)
	*e.heapAt() = len(*h)
	*h = append(*h, e)
}
func (h *indexedHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	var none T
	old[len(old)-1] = none
	*h = old[:len(old)-1]
	*e.heapAt() = -1
	return e
}

func (j *job) heapAt() *int                 { return &j.at }
func (j *job) heapBefore(o *job) bool       { return j.due.Before(o.due) }
func (h *holder) heapAt() *int              { return &h.at }
func (h *holder) heapBefore(o *holder) bool { return h.n > o.n }

// retryDue is how soon a job still in use past its retention is looked
// at again.
const retryDue = time.Second

// job finds or starts the job named id for client; an unnamed request
// starts a job of its own, outside the table: no later request can name
// it, it leaves as its request ends, and the request slots bound how many
// there are. A named job's client holding its share, or a full table
// nobody holding more than the client can make room in, gets a refusal
// (its row is a job of its own: no job was opened).
func (p *Proxy) job(id string, named bool, client string, now time.Time) (*job, *refusal) {
	if !named {
		j := &job{id: p.nextOwnID(), client: client, at: -1, turn: make(chan struct{}, 1)}
		j.m.Start(now, p.opts.Policy.Budget.Deadline)
		return j, nil
	}
	if j, ok := p.jobs[id]; ok {
		return j, nil
	}
	if early, ok := p.forgot.lookup(id); ok {
		ref := forgottenJob(id, early)
		return nil, &ref
	}
	p.expire(now)
	h := p.clients[client]
	held := 0
	if h != nil {
		held = h.n
	}
	if held >= p.opts.MaxClientJobs {
		return nil, &refusal{status: http.StatusTooManyRequests, reason: admit.ReasonProxyBusy, code: "client_jobs", retryAfter: p.freedIn(h.oldest(), now),
			message: fmt.Sprintf("retrygate: this client holds %d jobs, its most at once (--max-client-jobs)", p.opts.MaxClientJobs)}
	}
	if len(p.jobs) >= p.opts.MaxJobs && !p.makeRoom(held) {
		if held > 0 && p.holders[0].n <= held+1 {
			// Nobody holds more than one job over this client's: the
			// table is shared as evenly as it can be, and this client has
			// its part of it.
			return nil, &refusal{status: http.StatusTooManyRequests, reason: admit.ReasonProxyBusy, code: "client_jobs", retryAfter: p.freedIn(h.oldest(), now),
				message: fmt.Sprintf("retrygate: this client holds %d jobs of the full table (--max-jobs %d), as many as any other client", held, p.opts.MaxJobs)}
		}
		var first *job
		if len(p.expiry) > 0 {
			first = p.expiry[0]
		}
		return nil, &refusal{status: http.StatusServiceUnavailable, reason: admit.ReasonProxyBusy, code: "busy", retryAfter: p.freedIn(first, now),
			message: fmt.Sprintf("retrygate: proxy busy: %d jobs open", p.opts.MaxJobs)}
	}
	j := &job{id: id, named: true, client: client, at: -1, turn: make(chan struct{}, 1)}
	j.m.Start(now, p.opts.Policy.Budget.Deadline)
	p.jobs[id] = j
	if h == nil {
		h = &holder{}
		p.clients[client] = h
		heap.Push(&p.holders, h)
	}
	h.n++
	heap.Fix(&p.holders, h.at)
	h.named = append(h.named, j)
	j.due = j.m.Deadline().Add(p.opts.Retention)
	heap.Push(&p.expiry, j)
	return j, nil
}

// forgottenJob is the answer to a request naming job id, forgotten
// (early: to make room in the full table, else past its retention):
// its row is a job of its own (refuse).
func forgottenJob(id string, early bool) refusal {
	why := "past its deadline and retention (--job-retention)"
	if early {
		why = "before its retention ended, to make room for another client's job in the full table (--max-jobs)"
	}
	return refusal{status: http.StatusGone, reason: admit.ReasonProxyBusy, code: "job_forgotten", final: true,
		message: fmt.Sprintf("retrygate: job %s was forgotten %s; its books are gone: name a new job", id, why)}
}

// makeRoom frees a place in the full table for a new job of a client
// holding held jobs: the oldest job no request is running of the client
// holding the most, when that client holds more than one job over
// held (so that it still holds as many as the newcomer after). False
// when there is none.
func (p *Proxy) makeRoom(held int) bool {
	if len(p.holders) == 0 || p.holders[0].n <= held+1 {
		return false
	}
	h := p.holders[0]
	// The jobs before the one forgotten are running or gone: only the
	// running ones stay, and a client runs no more jobs than it has
	// request slots, so the walk is short.
	var busy []*job
	for i, j := range h.named {
		if j.gone {
			continue
		}
		if j.users > 0 {
			busy = append(busy, j)
			continue
		}
		start := i + 1 - len(busy)
		copy(h.named[start:i+1], busy)
		clear(h.named[:start])
		h.named = h.named[start:]
		p.forget(j, true)
		return true
	}
	clear(h.named[len(busy):])
	h.named = append(h.named[:0], busy...)
	return false
}

// forgotten is the names of the jobs forgotten, early (makeRoom) or at
// their retention's end (expire), the most recent 2×MaxJobs of them, as
// hashes. A later request naming one is refused: started again, the job
// would write a second row for its (job, attempt) 1 in the log, which a
// reader refuses, on books that forgot what it spent. The refusal's row
// is a job of its own (refuse), so it repeats no (job, attempt) either.
type forgotten struct {
	seed  maphash.Seed
	set   map[uint64]bool // true: forgotten early, to make room
	order []uint64        // a ring: next is the oldest once full
	next  int
}

func (f *forgotten) sum(id string) uint64 {
	if f.set == nil {
		f.seed, f.set = maphash.MakeSeed(), map[uint64]bool{}
	}
	return maphash.String(f.seed, id)
}

// lookup reports whether id was forgotten, and whether early.
func (f *forgotten) lookup(id string) (early, ok bool) {
	if len(f.set) == 0 {
		return false, false
	}
	early, ok = f.set[f.sum(id)]
	return early, ok
}

// add remembers id (early: forgotten to make room), forgetting the
// oldest past bound names.
func (f *forgotten) add(id string, bound int, early bool) {
	h := f.sum(id)
	if len(f.order) < bound {
		f.order = append(f.order, h)
	} else {
		delete(f.set, f.order[f.next])
		f.order[f.next] = h
		f.next = (f.next + 1) % bound
	}
	f.set[h] = early
}

// forget drops named job j from the table, keeping its name. The names
// kept are twice the table: until its retention would have ended, a job
// forgotten early makes way only for the jobs the table held then (fewer
// than MaxJobs; later ones come due later) and for MaxJobs more
// forgotten early, as when only those were kept.
func (p *Proxy) forget(j *job, early bool) {
	p.forgot.add(j.id, 2*p.opts.MaxJobs, early)
	p.drop(j)
}

// holder is what one client holds of the table: how many jobs, and
// those in the order they were opened (the oldest first: the first to be
// forgotten, give or take one still in flight), trimmed as they go.
type holder struct {
	n     int
	named []*job
	at    int // its index in the heap of holders
}

// oldest is the client's oldest named job, or nil.
func (h *holder) oldest() *job {
	if h == nil || len(h.named) == 0 {
		return nil
	}
	return h.named[0]
}

// drop forgets j.
func (p *Proxy) drop(j *job) {
	if j.gone || !j.named {
		j.gone = true
		return
	}
	delete(p.jobs, j.id)
	j.gone = true
	if j.at >= 0 {
		heap.Remove(&p.expiry, j.at)
	}
	h := p.clients[j.client]
	h.n--
	for len(h.named) > 0 && h.named[0].gone {
		h.named[0] = nil
		h.named = h.named[1:]
	}
	if h.n == 0 {
		heap.Remove(&p.holders, h.at)
		delete(p.clients, j.client)
		return
	}
	heap.Fix(&p.holders, h.at)
}

// expire forgets the in-process jobs due at now, in the order they come
// due: the cost is the jobs due, not the table; their names are kept
// (forgotten). A job still in use is looked at again a little later.
func (p *Proxy) expire(now time.Time) {
	for len(p.expiry) > 0 && !now.Before(p.expiry[0].due) {
		j := p.expiry[0]
		if j.users == 0 {
			p.forget(j, false)
			continue
		}
		j.due = now.Add(retryDue)
		heap.Fix(&p.expiry, 0)
	}
}

// freedIn is how long until j, the first of the jobs a refusal waits
// on, is forgotten (at least a second; a second when there is none, as
// for requests naming no job, which leave when they end): the
// refusal's Retry-After.
func (p *Proxy) freedIn(j *job, now time.Time) time.Duration {
	if j == nil {
		return time.Second
	}
	return max(j.due.Sub(now), time.Second)
}

// ownID is the proxy's name for the k-th request of its run that named
// no job: p<run>-<k>. No client may name a job so (isOwnID, jobName), so
// a named job never shares books or (job, attempt) rows with one of these.
// The form differs from rehearse's r<run>-<k> on purpose: a rehearsal
// pointed at the proxy names its jobs so, and they are named jobs here.
func ownID(run, k int) string { return "p" + strconv.Itoa(run) + "-" + strconv.Itoa(k) }

// isOwnID reports whether id has ownID's form, p<digits>-<digits>.
func isOwnID(id string) bool {
	run, k, ok := strings.Cut(id, "-")
	return ok && len(run) > 1 && run[0] == 'p' && digits(run[1:]) && digits(k)
}

func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
