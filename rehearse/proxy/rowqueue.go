package proxy

import (
	"sync"

	"retrygate/ledgerfile"
)

// rowQueue writes rows in the order they were decided, off the request
// path: rows are queued under the proxy's lock (so a job's rows keep
// their order) and one goroutine appends whatever has gathered in one
// go, so a busy proxy takes the log's lock once per batch, not per row.
type rowQueue struct {
	write func([]ledgerfile.Row) error
	fail  func(error)

	mu      sync.Mutex
	cond    *sync.Cond
	pending []ledgerfile.Row
	closed  bool
	done    chan struct{}
}

// maxQueued bounds rows waiting for the log: past it, deciding waits for
// the writer (a slow disk slows the proxy rather than growing memory).
const maxQueued = 8192

func newRowQueue(write func([]ledgerfile.Row) error, fail func(error)) *rowQueue {
	q := &rowQueue{write: write, fail: fail, done: make(chan struct{})}
	q.cond = sync.NewCond(&q.mu)
	go q.run()
	return q
}

func (q *rowQueue) add(r *ledgerfile.Row) {
	q.mu.Lock()
	for len(q.pending) >= maxQueued && !q.closed {
		q.cond.Wait()
	}
	q.pending = append(q.pending, *r)
	q.cond.Broadcast()
	q.mu.Unlock()
}

func (q *rowQueue) run() {
	defer close(q.done)
	var batch []ledgerfile.Row
	for {
		q.mu.Lock()
		for len(q.pending) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.pending) == 0 && q.closed {
			q.mu.Unlock()
			return
		}
		batch, q.pending = q.pending, batch[:0]
		q.cond.Broadcast()
		q.mu.Unlock()
		if err := q.write(batch); err != nil {
			q.fail(err)
		}
	}
}

// close writes every queued row, then stops.
func (q *rowQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
	<-q.done
}
